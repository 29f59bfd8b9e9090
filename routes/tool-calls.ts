/**
 * The /v1/sessions routes of a session's pending tool step: approve or deny a call, submit a client tool's result or
 * replace one under review, accept the reviewed results and go on. app.ts registers them right after sessions.ts
 * (which says why the order matters).
 */
import { continueRun, decide, putResult, submitResults } from '../src/sessions/tool-calls.js';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { decisionBody, emptyBody, sessionIdParam, toolResultBody, toolResultsBody } from '../src/schemas.js';
import { actorOf } from '../src/plugins/auth.js';
import { stepResultsTooLarge } from '../src/openapi/responses.js';
import {
  ifMatchHeader,
  keyed,
  scopedMutation,
  sessionIfMatch,
  scopedPostMutation,
  sendMutation,
} from './mutations.js';

const toolUseParams = sessionIdParam.extend({ tool_use_id: z.string().min(1).max(128) });

const routes: FastifyPluginAsyncZod = async (app) => {
  const deps = app.sessionDeps;
  const tags = ['sessions'];

  app.post(
    '/v1/sessions/:id/tool-calls/:tool_use_id',
    {
      config: { scope: 'decide' },
      schema: {
        operationId: 'decideToolCall',
        summary: 'Approve or deny a tool call (optionally with an edited input)',
        tags,
        params: toolUseParams,
        body: decisionBody,
        headers: ifMatchHeader,
        // 413: a denial is the call's result, bounded with the step's others (MAX_TURN_BYTES).
        response: { ...scopedPostMutation, 413: stepResultsTooLarge() },
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await decide(
          keyed(deps, req),
          req.tenant,
          req.params.id,
          req.params.tool_use_id,
          req.body,
          await sessionIfMatch(req, deps),
          actorOf(req.clientToken),
        ),
      ),
  );

  app.put(
    '/v1/sessions/:id/tool-results/:tool_use_id',
    {
      config: { scope: 'results' },
      schema: {
        operationId: 'putToolResult',
        summary: "Replace a result under review, or submit a client tool's result",
        tags,
        params: toolUseParams,
        body: toolResultBody,
        headers: ifMatchHeader,
        // 409: nothing awaits results, the id is not one the step expects, it was answered already, or its reply is
        // under review (review_turn: results after continue).
        response: { ...scopedMutation(409), 413: stepResultsTooLarge() },
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await putResult(
          deps,
          req.tenant,
          req.params.id,
          req.params.tool_use_id,
          req.body,
          await sessionIfMatch(req, deps),
        ),
      ),
  );

  app.post(
    '/v1/sessions/:id/tool-results',
    {
      config: { scope: 'results' },
      schema: {
        operationId: 'submitToolResults',
        summary: 'Submit several tool results at once',
        tags,
        params: sessionIdParam,
        body: toolResultsBody,
        headers: ifMatchHeader,
        response: { ...scopedPostMutation, 413: stepResultsTooLarge() },
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await submitResults(
          keyed(deps, req),
          req.tenant,
          req.params.id,
          req.body.results,
          req.body.continue,
          await sessionIfMatch(req, deps),
        ),
      ),
  );

  app.post(
    '/v1/sessions/:id/continue',
    {
      config: { scope: 'results' },
      schema: {
        operationId: 'continueSession',
        summary: 'Accept the reviewed tool results as they stand and go on',
        tags,
        params: sessionIdParam,
        body: emptyBody,
        headers: ifMatchHeader,
        response: scopedPostMutation,
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await continueRun(keyed(deps, req), req.tenant, req.params.id, await sessionIfMatch(req, deps)),
      ),
  );
};

export default routes;
