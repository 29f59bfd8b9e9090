/**
 * The /v1/sessions routes: each is schema, auth scope and a call into SessionService; over 400 lines only because
 * the routes' zod schemas and OpenAPI answers sit beside their handlers, which keeps each route readable in one place.
 */
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { AppError, notFound } from '../src/errors.js';
import {
  compactBody,
  createSessionBody,
  decisionBody,
  forkBody,
  listQuery,
  patchSessionBody,
  postMessageBody,
  retryBody,
  emptyBody,
  sessionIdParam,
  toolResultBody,
  toolResultsBody,
} from '../src/schemas.js';
import { sessionView } from '../src/sessions/view.js';
import type { MutationResult } from '../src/sessions/service.js';
import type { SessionState } from '../src/store/session-state.js';
import {
  deletedSession,
  errors,
  iterationDetail,
  iterationList,
  messageList,
  session,
  sessionList,
} from '../src/openapi/responses.js';

const ifMatchHeader = z.looseObject({
  'if-match': z
    .string()
    .regex(/^(W\/)?"?\d+"?$/, 'If-Match takes the revision from the ETag, e.g. "17"')
    .optional(),
});

/** Answers of a mutation: the session, 200 when done, 202 when work was queued; and its errors. */
const mutation = (...more: Array<409 | 422>) => ({
  200: session,
  202: session,
  ...errors(400, 401, 404, 412, 413, 415, 429, 500, 503, ...more),
});
const postMutation = mutation(409, 422);
const read = errors(400, 401, 404, 500, 503);

const toolUseParams = sessionIdParam.extend({ tool_use_id: z.string().min(1).max(128) });
const iterationParams = sessionIdParam.extend({ n: z.coerce.number().int().min(1) });
const messagesQuery = z.strictObject({ include: z.enum(['compacted']).optional() });

export function parseIfMatch(req: FastifyRequest): number | undefined {
  const h = req.headers['if-match'];
  if (typeof h !== 'string') return undefined;
  return Number(h.replace(/^W\//, '').replace(/"/g, ''));
}

function send(reply: FastifyReply, s: SessionState, code = 200) {
  return reply.code(code).header('etag', `"${s.revision}"`).send(sessionView(s));
}

function sendMutation(reply: FastifyReply, r: MutationResult) {
  return send(reply, r.state, r.queued ? 202 : 200);
}

const routes: FastifyPluginAsyncZod = async (app) => {
  const svc = app.sessions;
  const tags = ['sessions'];

  app.post(
    '/v1/sessions',
    {
      schema: {
        operationId: 'createSession',
        summary: 'Create a session',
        description: 'Creates a session and (unless `start: false`) starts its first run.',
        tags,
        body: createSessionBody,
        response: { 201: session, ...errors(400, 401, 409, 413, 415, 422, 429, 500, 503) },
      },
    },
    async (req, reply) => {
      const s = await svc.create(req.tenant, req.body);
      return send(reply, s, 201);
    },
  );

  app.get(
    '/v1/sessions',
    {
      schema: {
        operationId: 'listSessions',
        summary: "List the caller's sessions, newest first",
        tags,
        querystring: listQuery,
        response: { 200: sessionList, ...errors(400, 401, 500, 503) },
      },
    },
    async (req) => {
      const page = await app.store.list(req.tenant, req.query);
      return { data: page.items.map(sessionView), next_cursor: page.next, has_more: page.next !== null };
    },
  );

  app.get(
    '/v1/sessions/:id',
    {
      schema: {
        operationId: 'getSession',
        summary: 'Get a session',
        tags,
        params: sessionIdParam,
        response: { 200: session, ...read },
      },
    },
    async (req, reply) => {
      const s = await app.store.loadFor(req.tenant, req.params.id);
      return send(reply, s);
    },
  );

  app.delete(
    '/v1/sessions/:id',
    {
      schema: {
        operationId: 'deleteSession',
        summary: 'Delete a session',
        description: 'Cancels the run in flight, then deletes every key of the session.',
        tags,
        params: sessionIdParam,
        headers: ifMatchHeader,
        response: { 200: deletedSession, ...errors(400, 401, 404, 412, 429, 500, 503) },
      },
    },
    async (req) => {
      await svc.remove(req.tenant, req.params.id, parseIfMatch(req));
      return { id: req.params.id, object: 'session' as const, deleted: true as const };
    },
  );

  app.get(
    '/v1/sessions/:id/messages',
    {
      schema: {
        operationId: 'listMessages',
        summary: 'The history, exactly as the next turn would send it',
        tags,
        description:
          'With `include=compacted`, also `compacted`: the messages each compaction summarized, oldest segment first.',
        params: sessionIdParam,
        querystring: messagesQuery,
        response: { 200: messageList, ...read },
      },
    },
    async (req) => {
      return svc.messages(req.tenant, req.params.id, req.query.include === 'compacted');
    },
  );

  app.get(
    '/v1/sessions/:id/iterations',
    {
      schema: {
        operationId: 'listIterations',
        summary: 'The persisted iteration records',
        tags,
        params: sessionIdParam,
        response: { 200: iterationList, ...read },
      },
    },
    async (req) => {
      await app.store.loadFor(req.tenant, req.params.id);
      const records = await app.store.iterationRecords(req.params.id);
      return { data: records };
    },
  );

  app.get(
    '/v1/sessions/:id/iterations/:n',
    {
      schema: {
        operationId: 'getIteration',
        summary: 'One iteration record with its reply and tool results',
        tags,
        params: iterationParams,
        response: { 200: iterationDetail, ...read },
      },
    },
    async (req) => {
      const s = await app.store.loadFor(req.tenant, req.params.id);
      const [rec] = await app.store.iterationRecords(req.params.id, req.params.n - 1, req.params.n - 1);
      if (!rec) throw notFound('iteration');
      const end = rec.results_index ?? rec.reply_index;
      // Indexes count compacted messages too: a reply a compaction summarized is read from its segment.
      const msgs =
        rec.reply_index < 0 ? [] : await app.store.messagesAt(req.params.id, s.msgBase, rec.reply_index, end);
      return {
        ...rec,
        reply: msgs[0] ?? null,
        tool_results: rec.results_index !== null ? (msgs.at(-1) ?? null) : null,
      };
    },
  );

  app.post(
    '/v1/sessions/:id/messages',
    {
      schema: {
        operationId: 'addMessage',
        summary: 'Add a user message (a follow-up)',
        description:
          'Running: queued for the next turn boundary (202); idle or failed: appended and a run starts (202). `interrupt: true` aborts the turn in flight.',
        tags,
        params: sessionIdParam,
        body: postMessageBody,
        headers: ifMatchHeader,
        response: postMutation,
      },
    },
    async (req, reply) =>
      sendMutation(reply, await svc.addMessage(req.tenant, req.params.id, req.body, parseIfMatch(req))),
  );

  app.post(
    '/v1/sessions/:id/tool-calls/:tool_use_id',
    {
      schema: {
        operationId: 'decideToolCall',
        summary: 'Approve or deny a tool call (optionally with an edited input)',
        tags,
        params: toolUseParams,
        body: decisionBody,
        headers: ifMatchHeader,
        response: postMutation,
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await svc.decide(req.tenant, req.params.id, req.params.tool_use_id, req.body, parseIfMatch(req)),
      ),
  );

  app.put(
    '/v1/sessions/:id/tool-results/:tool_use_id',
    {
      schema: {
        operationId: 'putToolResult',
        summary: "Replace a result under review, or submit a client tool's result",
        tags,
        params: toolUseParams,
        body: toolResultBody,
        headers: ifMatchHeader,
        response: mutation(),
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await svc.putResult(req.tenant, req.params.id, req.params.tool_use_id, req.body, parseIfMatch(req)),
      ),
  );

  app.post(
    '/v1/sessions/:id/tool-results',
    {
      schema: {
        operationId: 'submitToolResults',
        summary: 'Submit several tool results at once',
        tags,
        params: sessionIdParam,
        body: toolResultsBody,
        headers: ifMatchHeader,
        response: postMutation,
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await svc.results(req.tenant, req.params.id, req.body.results, req.body.continue, parseIfMatch(req)),
      ),
  );

  app.post(
    '/v1/sessions/:id/continue',
    {
      schema: {
        operationId: 'continueSession',
        summary: 'Accept the reviewed tool results as they stand and go on',
        tags,
        params: sessionIdParam,
        body: emptyBody,
        headers: ifMatchHeader,
        response: postMutation,
      },
    },
    async (req, reply) =>
      sendMutation(reply, await svc.continue(req.tenant, req.params.id, parseIfMatch(req))),
  );

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
        response: mutation(),
      },
    },
    async (req, reply) =>
      sendMutation(reply, await svc.patch(req.tenant, req.params.id, req.body, parseIfMatch(req))),
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
      sendMutation(reply, await svc.retry(req.tenant, req.params.id, req.body ?? {}, parseIfMatch(req))),
  );

  app.post(
    '/v1/sessions/:id/cancel',
    {
      schema: {
        operationId: 'cancelSession',
        summary: 'Abort the turn in flight',
        description: 'The history stays valid; the session ends `idle` with stop_reason `cancelled`.',
        tags,
        params: sessionIdParam,
        body: emptyBody,
        headers: ifMatchHeader,
        response: postMutation,
      },
    },
    async (req, reply) => sendMutation(reply, await svc.cancel(req.tenant, req.params.id, parseIfMatch(req))),
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
    async (req, reply) => sendMutation(reply, await svc.resume(req.tenant, req.params.id, parseIfMatch(req))),
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
      sendMutation(reply, await svc.compact(req.tenant, req.params.id, req.body, parseIfMatch(req))),
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
        response: { 201: session, ...errors(400, 401, 404, 409, 412, 413, 415, 422, 429, 500, 503) },
      },
    },
    async (req, reply) =>
      send(reply, await svc.fork(req.tenant, req.params.id, req.body, parseIfMatch(req)), 201),
  );
};

export default routes;
export { AppError };
