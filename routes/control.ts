/**
 * The /v1/sessions routes that steer a session: change its params and policies (PATCH), retry the last turn, cancel,
 * resume a failed session, compact its history, fork a new session from it. app.ts registers them after
 * tool-calls.ts (sessions.ts says why the order matters).
 */
import { compactSession } from '../src/sessions/compact.js';
import { cancelRun, patchSession, resumeRun, retryTurn } from '../src/sessions/control.js';
import { forkSession } from '../src/sessions/fork.js';
import { replaceMessages } from '../src/sessions/replace.js';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import {
  compactBody,
  emptyBody,
  forkBody,
  patchSessionBody,
  replaceMessagesBody,
  retryBody,
  sessionIdParam,
} from '../src/schemas.js';
import { routeErrors, session } from '../src/openapi/responses.js';
import {
  ifMatchHeader,
  keyed,
  mutation,
  sessionIfMatch,
  postMutation,
  scopedPostMutation,
  send,
  sendMutation,
} from './mutations.js';

const routes: FastifyPluginAsyncZod = async (app) => {
  const deps = app.sessionDeps;
  const tags = ['sessions'];

  app.patch(
    '/v1/sessions/:id',
    {
      schema: {
        operationId: 'updateSession',
        summary: 'Change params, policies or metadata from the next turn on',
        tags,
        params: sessionIdParam,
        body: patchSessionBody,
        headers: ifMatchHeader,
        // 409 `tool_call_pending`: `tools` cannot change while a call of the step waits.
        response: mutation(409),
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await patchSession(deps, req.tenant, req.params.id, req.body, await sessionIfMatch(req, deps)),
      ),
  );

  app.post(
    '/v1/sessions/:id/retry',
    {
      schema: {
        operationId: 'retrySession',
        summary: 'Drop the last reply and send that turn again',
        description: 'Optionally with `params` changes (e.g. a bigger `max_tokens` for a truncated reply).',
        tags,
        params: sessionIdParam,
        body: retryBody,
        headers: ifMatchHeader,
        response: postMutation,
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await retryTurn(
          keyed(deps, req),
          req.tenant,
          req.params.id,
          req.body ?? {},
          await sessionIfMatch(req, deps),
        ),
      ),
  );

  app.put(
    '/v1/sessions/:id/messages',
    {
      schema: {
        operationId: 'replaceSessionMessages',
        summary: "Replace the whole history (the runner's setMessagesParams)",
        description:
          'Only while `idle`, `failed`, or reviewing a turn (`review_turn`) or tool results (`review_tool_results`), whose ' +
          'reply or results are dropped unless the new history holds them (409 `session_not_replaceable` otherwise; ' +
          '409 `action_timed_out` for a review past its `expires_at`). ' +
          'The history is checked as create ' +
          'checks one (400 `invalid_history`); the session goes `idle`, its message thread is dropped. Event ' +
          '`messages.replaced {message_count}`.',
        tags,
        params: sessionIdParam,
        body: replaceMessagesBody,
        headers: ifMatchHeader,
        response: mutation(409),
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await replaceMessages(
          deps,
          req.tenant,
          req.params.id,
          req.body.messages,
          await sessionIfMatch(req, deps),
        ),
      ),
  );

  app.post(
    '/v1/sessions/:id/cancel',
    {
      config: { scope: 'cancel' },
      schema: {
        operationId: 'cancelSession',
        summary: 'Abort the turn in flight',
        description: 'The history stays valid; the session ends `idle` with stop_reason `cancelled`.',
        tags,
        params: sessionIdParam,
        body: emptyBody,
        headers: ifMatchHeader,
        response: scopedPostMutation,
      },
    },
    async (req, reply) =>
      sendMutation(reply, await cancelRun(deps, req.tenant, req.params.id, await sessionIfMatch(req, deps))),
  );

  app.post(
    '/v1/sessions/:id/resume',
    {
      schema: {
        operationId: 'resumeSession',
        summary: 'Retry the failed step of a failed session',
        tags,
        params: sessionIdParam,
        body: emptyBody,
        headers: ifMatchHeader,
        response: postMutation,
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await resumeRun(keyed(deps, req), req.tenant, req.params.id, await sessionIfMatch(req, deps)),
      ),
  );

  app.post(
    '/v1/sessions/:id/compact',
    {
      schema: {
        operationId: 'compactSession',
        summary: 'Compact the history: a summary replaces it, the messages are kept',
        description:
          'Running: scheduled after the current turn and its tool calls (202). Idle or failed: one compaction request now, then the session is back in its status (202). Waiting for a client: 409. The summarized messages stay readable with `GET …/messages?include=compacted`.',
        tags,
        params: sessionIdParam,
        body: compactBody,
        headers: ifMatchHeader,
        response: postMutation,
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await compactSession(
          keyed(deps, req),
          req.tenant,
          req.params.id,
          req.body,
          await sessionIfMatch(req, deps),
        ),
      ),
  );

  app.post(
    '/v1/sessions/:id/fork',
    {
      schema: {
        operationId: 'forkSession',
        summary: "Fork a new session from this one's history up to an iteration",
        tags,
        params: sessionIdParam,
        body: forkBody,
        headers: ifMatchHeader,
        response: {
          201: session,
          ...routeErrors(
            { 404: ['session_not_found', 'iteration_not_found'] },
            400,
            401,
            404,
            409,
            412,
            413,
            415,
            422,
            429,
            500,
            503,
          ),
        },
      },
    },
    async (req, reply) => {
      const fork = await forkSession(
        keyed(deps, req),
        req.tenant,
        req.params.id,
        req.body,
        await sessionIfMatch(req, deps),
      );
      req.createdSession = fork.state.id;
      if (fork.replayed) reply.header('idempotent-replayed', 'true');
      return send(reply, fork.state, 201);
    },
  );
};

export default routes;
