import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { AppError, notFound } from '../src/errors.js';
import {
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
import type { SessionState } from '../src/store/store.js';

const ifMatchHeader = z.looseObject({
  'if-match': z
    .string()
    .regex(/^(W\/)?"?\d+"?$/, 'If-Match takes the revision from the ETag, e.g. "17"')
    .optional(),
});

const toolUseParams = sessionIdParam.extend({ tool_use_id: z.string().min(1).max(128) });
const iterationParams = sessionIdParam.extend({ n: z.coerce.number().int().min(1) });

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

  app.post('/v1/sessions', { schema: { tags, body: createSessionBody } }, async (req, reply) => {
    const s = await svc.create(req.tenant, req.body);
    return send(reply, s, 201);
  });

  app.get('/v1/sessions', { schema: { tags, querystring: listQuery } }, async (req) => {
    const page = await app.store.list(req.tenant, req.query);
    return { data: page.items.map(sessionView), next_cursor: page.next, has_more: page.next !== null };
  });

  app.get('/v1/sessions/:id', { schema: { tags, params: sessionIdParam } }, async (req, reply) => {
    const s = await app.store.loadFor(req.tenant, req.params.id);
    return send(reply, s);
  });

  app.delete(
    '/v1/sessions/:id',
    { schema: { tags, params: sessionIdParam, headers: ifMatchHeader } },
    async (req) => {
      await svc.remove(req.tenant, req.params.id, parseIfMatch(req));
      return { id: req.params.id, object: 'session', deleted: true };
    },
  );

  app.get('/v1/sessions/:id/messages', { schema: { tags, params: sessionIdParam } }, async (req) => {
    return svc.messages(req.tenant, req.params.id);
  });

  app.get('/v1/sessions/:id/iterations', { schema: { tags, params: sessionIdParam } }, async (req) => {
    await app.store.loadFor(req.tenant, req.params.id);
    const records = await app.store.iterationRecords(req.params.id);
    return { data: records };
  });

  app.get('/v1/sessions/:id/iterations/:n', { schema: { tags, params: iterationParams } }, async (req) => {
    await app.store.loadFor(req.tenant, req.params.id);
    const [rec] = await app.store.iterationRecords(req.params.id, req.params.n - 1, req.params.n - 1);
    if (!rec) throw notFound('iteration');
    const end = rec.results_index ?? rec.reply_index;
    const msgs = await app.store.history(req.params.id, rec.reply_index, end);
    return {
      ...rec,
      reply: msgs[0] ?? null,
      tool_results: rec.results_index !== null ? (msgs.at(-1) ?? null) : null,
    };
  });

  app.post(
    '/v1/sessions/:id/messages',
    { schema: { tags, params: sessionIdParam, body: postMessageBody, headers: ifMatchHeader } },
    async (req, reply) =>
      sendMutation(reply, await svc.addMessage(req.tenant, req.params.id, req.body, parseIfMatch(req))),
  );

  app.post(
    '/v1/sessions/:id/tool-calls/:tool_use_id',
    { schema: { tags, params: toolUseParams, body: decisionBody, headers: ifMatchHeader } },
    async (req, reply) =>
      sendMutation(
        reply,
        await svc.decide(req.tenant, req.params.id, req.params.tool_use_id, req.body, parseIfMatch(req)),
      ),
  );

  app.put(
    '/v1/sessions/:id/tool-results/:tool_use_id',
    { schema: { tags, params: toolUseParams, body: toolResultBody, headers: ifMatchHeader } },
    async (req, reply) =>
      sendMutation(
        reply,
        await svc.putResult(req.tenant, req.params.id, req.params.tool_use_id, req.body, parseIfMatch(req)),
      ),
  );

  app.post(
    '/v1/sessions/:id/tool-results',
    { schema: { tags, params: sessionIdParam, body: toolResultsBody, headers: ifMatchHeader } },
    async (req, reply) =>
      sendMutation(
        reply,
        await svc.results(req.tenant, req.params.id, req.body.results, req.body.continue, parseIfMatch(req)),
      ),
  );

  app.post(
    '/v1/sessions/:id/continue',
    { schema: { tags, params: sessionIdParam, body: emptyBody, headers: ifMatchHeader } },
    async (req, reply) =>
      sendMutation(reply, await svc.continue(req.tenant, req.params.id, parseIfMatch(req))),
  );

  app.patch(
    '/v1/sessions/:id',
    { schema: { tags, params: sessionIdParam, body: patchSessionBody, headers: ifMatchHeader } },
    async (req, reply) =>
      sendMutation(reply, await svc.patch(req.tenant, req.params.id, req.body, parseIfMatch(req))),
  );

  app.post(
    '/v1/sessions/:id/retry',
    { schema: { tags, params: sessionIdParam, body: retryBody, headers: ifMatchHeader } },
    async (req, reply) =>
      sendMutation(reply, await svc.retry(req.tenant, req.params.id, req.body ?? {}, parseIfMatch(req))),
  );

  app.post(
    '/v1/sessions/:id/cancel',
    { schema: { tags, params: sessionIdParam, body: emptyBody, headers: ifMatchHeader } },
    async (req, reply) => sendMutation(reply, await svc.cancel(req.tenant, req.params.id, parseIfMatch(req))),
  );

  app.post(
    '/v1/sessions/:id/resume',
    { schema: { tags, params: sessionIdParam, body: emptyBody, headers: ifMatchHeader } },
    async (req, reply) => sendMutation(reply, await svc.resume(req.tenant, req.params.id, parseIfMatch(req))),
  );

  app.post(
    '/v1/sessions/:id/fork',
    { schema: { tags, params: sessionIdParam, body: forkBody, headers: ifMatchHeader } },
    async (req, reply) =>
      send(reply, await svc.fork(req.tenant, req.params.id, req.body, parseIfMatch(req)), 201),
  );
};

export default routes;
export { AppError };
