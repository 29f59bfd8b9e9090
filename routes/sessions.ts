/**
 * The /v1/sessions routes of the session itself: create, list, get, delete, its messages (read, add a follow-up) and
 * its iteration records; each is schema, auth scope and a call into an operation of src/sessions/ with
 * `app.sessionDeps` (or a read of the store). The routes of the pending tool step are in tool-calls.ts, those that
 * steer a session in control.ts. app.ts registers the three in this order, sessions.ts first: the OpenAPI document
 * lists paths and methods in registration order.
 */
import { removeSession } from '../src/sessions/control.js';
import { createKeyed, createSession } from '../src/sessions/create.js';
import { addMessage, listMessages } from '../src/sessions/messages.js';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { intParam } from '../src/int-param.js';
import { badRequest, notFound } from '../src/errors.js';
import { createSessionBody, listQuery, postMessageBody, sessionIdParam } from '../src/schemas.js';
import { sessionView } from '../src/sessions/view.js';
import { withText } from '../src/openapi/serializer.js';
import {
  MAX_METADATA_FILTERS,
  MAX_METADATA_KEY,
  MAX_METADATA_VALUE,
  type MetadataPair,
} from '../src/store/metadata-index.js';
import {
  deletedSession,
  errors,
  routeErrors,
  iterationDetail,
  iterationList,
  messageList,
  payloadTooLarge,
  session,
  sessionList,
} from '../src/openapi/responses.js';
import { actorOf } from '../src/plugins/auth.js';
import {
  SESSION_NOT_FOUND,
  ifMatchHeader,
  keyed,
  sessionIfMatch,
  scopedPostMutation,
  send,
  sendMutation,
  viewFor,
} from './mutations.js';
import type { SessionState } from '../src/store/session-state.js';

const read = routeErrors(SESSION_NOT_FOUND, 400, 401, 404, 500, 503);
const readIteration = routeErrors(
  { 404: ['session_not_found', 'iteration_not_found'] },
  400,
  401,
  404,
  500,
  503,
);

/**
 * A page of GET /v1/sessions (and of a session's children, agents.ts) stops before the session that would take it
 * over this many bytes (never empty).
 */
export const LIST_PAGE_MAX_BYTES = 1_048_576;

const iterationParams = sessionIdParam.extend({ n: intParam(1) });
const messagesQuery = z.strictObject({ include: z.enum(['compacted']).optional() });

const METADATA_PARAM = /^metadata\.(.+)$/s;

/**
 * `GET /v1/sessions`'s query: `limit`, `cursor`, `status`, and up to MAX_METADATA_FILTERS `metadata.<key>=<value>`
 * filters (key 1–64, value 0–512 characters; a string, number or boolean value matches its text). Anything else is
 * refused as by the strict schema it extends, in the same shape (one `unrecognized_keys` issue at the query's root,
 * naming them), and so is a filter whose key is too long. The parameters it takes are its own (`Object.hasOwn`: a
 * `constructor` or `toString` is no parameter of it).
 */
const listSessionsQuery = listQuery.catchall(z.string().max(MAX_METADATA_VALUE)).superRefine((q, ctx) => {
  let filters = 0;
  const unknown: string[] = [];
  for (const key of Object.keys(q)) {
    if (Object.hasOwn(listQuery.shape, key)) continue;
    const m = METADATA_PARAM.exec(key);
    if (!m) unknown.push(key);
    else if (m[1]!.length > MAX_METADATA_KEY)
      ctx.addIssue({
        code: 'custom',
        path: [key],
        message: `a metadata filter's key is 1-${MAX_METADATA_KEY} characters`,
      });
    else if (++filters > MAX_METADATA_FILTERS)
      ctx.addIssue({
        code: 'custom',
        path: [key],
        message: `at most ${MAX_METADATA_FILTERS} metadata filters`,
      });
  }
  // zod's own message for it: `Unrecognized key: "x"`.
  if (unknown.length) ctx.addIssue({ code: 'unrecognized_keys', keys: unknown, path: [], input: q });
});

/** A session's view and its JSON text. */
function viewOf(s: SessionState) {
  const view = sessionView(s);
  return { view, text: JSON.stringify(view) };
}

/** The `metadata.<key>=<value>` pairs of a (validated) list query. */
const metadataFilters = (q: Record<string, unknown>): MetadataPair[] =>
  Object.entries(q).flatMap(([k, v]) => {
    const m = METADATA_PARAM.exec(k);
    return m && typeof v === 'string' ? [[m[1]!, v] as MetadataPair] : [];
  });

const routes: FastifyPluginAsyncZod = async (app) => {
  const deps = app.sessionDeps;
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
      if (!req.idempotency) {
        const s = await createSession(deps, req.tenant, req.body);
        req.createdSession = s.id;
        return send(reply, s, 201);
      }
      // Named after the key: a retry after a crash between the create and its answer's record finds it made.
      const { state, replayed } = await createKeyed(deps, req.tenant, req.body, req.idempotency.token);
      req.createdSession = state.id;
      if (replayed) reply.header('idempotent-replayed', 'true');
      return send(reply, state, 201);
    },
  );

  app.get(
    '/v1/sessions',
    {
      schema: {
        operationId: 'listSessions',
        summary: "List the caller's sessions, newest first",
        description:
          'Filters: `status`, and up to 3 `metadata.<key>=<value>` (all must hold; key 1-64, value up to 512 ' +
          'characters; a string, number or boolean metadata value matches its text), answered from an index.',
        tags,
        querystring: listSessionsQuery,
        response: { 200: sessionList, ...errors(400, 401, 500, 503) },
      },
      // The schema's catchall would drop a `__proto__` parameter unseen (its output takes it as a prototype): it is
      // refused here, as every strict query schema refuses it.
      preValidation: async (req) => {
        if (Object.hasOwn(req.query as object, '__proto__'))
          throw badRequest('Invalid request querystring.', [
            { path: '/', code: 'unrecognized_keys', message: 'Unrecognized key: "__proto__"' },
          ]);
      },
    },
    async (req) => {
      // Each session's view and its JSON text, made once: the text measures the page and is the page.
      const views = new Map<SessionState, { view: ReturnType<typeof sessionView>; text: string }>();
      const { limit, cursor, status } = req.query;
      const page = await app.store.index.list(
        req.tenant,
        { limit, cursor, status, metadata: metadataFilters(req.query) },
        {
          maxBytes: LIST_PAGE_MAX_BYTES,
          sizeOf: (s) => {
            const view = sessionView(s);
            const text = JSON.stringify(view);
            views.set(s, { view, text });
            return Buffer.byteLength(text);
          },
        },
      );
      const items = page.items.map((s) => views.get(s) ?? viewOf(s));
      const body = { data: items.map((i) => i.view), next_cursor: page.next, has_more: page.next !== null };
      const text = `{"data":[${items.map((i) => i.text).join(',')}],"next_cursor":${JSON.stringify(body.next_cursor)},"has_more":${body.has_more}}`;
      return withText(body, text);
    },
  );

  app.get(
    '/v1/sessions/:id',
    {
      config: { scope: 'read' },
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
      // A parent waiting for its sub-agents names those that wait for a client (spec §7.6).
      const waiting = await app.agents.waiting(s);
      const v = viewFor(req, s);
      if (!waiting.length || !v.required_action) return send(reply, s);
      return reply
        .header('etag', `"${s.revision}"`)
        .send({ ...v, required_action: { ...v.required_action, children_waiting: waiting } });
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
        response: {
          200: deletedSession,
          ...routeErrors(SESSION_NOT_FOUND, 400, 401, 404, 412, 413, 415, 429, 500, 503),
        },
      },
    },
    async (req) => {
      await removeSession(deps, req.tenant, req.params.id, await sessionIfMatch(req, deps));
      return { id: req.params.id, object: 'session' as const, deleted: true as const };
    },
  );

  app.get(
    '/v1/sessions/:id/messages',
    {
      config: { scope: 'read' },
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
      return listMessages(deps, req.tenant, req.params.id, req.query.include === 'compacted');
    },
  );

  app.get(
    '/v1/sessions/:id/iterations',
    {
      config: { scope: 'read' },
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
      // Record n is entry n - 1 (records stored before they carried `n` get it from their place). `denied` is the
      // chat history's (src/chat/denials.ts), not shown.
      return { data: records.map(({ denied: _d, ...r }, i) => ({ ...r, n: i + 1 })) };
    },
  );

  app.get(
    '/v1/sessions/:id/iterations/:n',
    {
      config: { scope: 'read' },
      schema: {
        operationId: 'getIteration',
        summary: 'One iteration record with its reply and tool results',
        tags,
        params: iterationParams,
        response: { 200: iterationDetail, ...readIteration },
      },
    },
    async (req) => {
      const s = await app.store.loadFor(req.tenant, req.params.id);
      const [stored] = await app.store.iterationRecords(req.params.id, req.params.n - 1, req.params.n - 1);
      if (!stored) throw notFound('iteration');
      const { denied: _d, ...rec } = stored;
      const end = rec.results_index ?? rec.reply_index;
      // Indexes count compacted messages too: a reply a compaction summarized is read from its segment. A record
      // made before the history was replaced (`PUT …/messages`) addresses messages that are gone: none.
      const gone = rec.reply_index < 0 || req.params.n <= s.replacedAt;
      const msgs = gone ? [] : await app.store.messagesAt(req.params.id, s.msgBase, rec.reply_index, end);
      return {
        ...rec,
        n: req.params.n,
        reply: msgs[0] ?? null,
        tool_results: rec.results_index !== null ? (msgs.at(-1) ?? null) : null,
      };
    },
  );

  app.post(
    '/v1/sessions/:id/messages',
    {
      config: { scope: 'message' },
      schema: {
        operationId: 'addMessage',
        summary: 'Add a user message (a follow-up)',
        description:
          'Running: queued for the next turn boundary (202); idle or failed: appended and a run starts (202). `interrupt: true` aborts the turn in flight.',
        tags,
        params: sessionIdParam,
        body: postMessageBody,
        headers: ifMatchHeader,
        response: {
          ...scopedPostMutation,
          413: payloadTooLarge('the user turn the follow-up joins would be larger than MAX_TURN_BYTES'),
        },
      },
    },
    async (req, reply) =>
      sendMutation(
        reply,
        await addMessage(
          keyed(deps, req),
          req.tenant,
          req.params.id,
          req.body,
          await sessionIfMatch(req, deps),
          actorOf(req.clientToken),
        ),
      ),
  );
};

export default routes;
