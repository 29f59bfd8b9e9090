import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { sessionList, routeErrors, type RouteCodes } from '../src/openapi/responses.js';
import { withText } from '../src/openapi/serializer.js';
import { z } from 'zod';
import { intQuery } from '../src/int-param.js';
import { listQuery, sessionIdParam } from '../src/schemas.js';
import { viewFor } from './mutations.js';
import { LIST_PAGE_MAX_BYTES } from './sessions.js';
import type { SessionState } from '../src/store/session-state.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['session_not_found'] } as const satisfies RouteCodes;

/**
 * `limit` and `cursor` as `GET /v1/sessions` takes them (same bounds and refusals), `limit` 100 by default: the route
 * answered every child before it was paged, so a client of then that reads one page gets up to 100 (a page still
 * stops before LIST_PAGE_MAX_BYTES).
 */
const childrenQuery = z.strictObject({ limit: intQuery(1, 100, 100), cursor: listQuery.shape.cursor });

/** Spec §7.6: the children of a session (its sub-agents' sessions). */
const routes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/v1/sessions/:id/children',
    {
      // A client token of the parent with `read` lists its children (their views; each child's own reads need a
      // token of that child).
      config: { scope: 'read' },
      schema: {
        operationId: 'listChildren',
        summary: "The sessions the session's sub-agent calls created, oldest first",
        description:
          'Paged as `GET /v1/sessions` is (`limit`, `cursor`; `next_cursor`, `has_more`). A page may hold fewer ' +
          'than `limit` children (none even) while `has_more` is true: a deleted child is skipped, not replaced.',
        tags: ['sessions'],
        params: sessionIdParam,
        querystring: childrenQuery,
        response: { 200: sessionList, ...routeErrors(NOT_FOUND, 400, 401, 403, 404, 500, 503) },
      },
    },
    async (req) => {
      const s = await app.store.loadFor(req.tenant, req.params.id);
      // Each child's view and its JSON text, made once: the text measures the page and is the page.
      const views = new Map<SessionState, { view: ReturnType<typeof viewFor>; text: string }>();
      const viewOf = (c: SessionState) => {
        let v = views.get(c);
        if (!v) {
          const view = viewFor(req, c);
          v = { view, text: JSON.stringify(view) };
          views.set(c, v);
        }
        return v;
      };
      const page = await app.agents.children(req.tenant, s.id, req.query, {
        maxBytes: LIST_PAGE_MAX_BYTES,
        sizeOf: (c) => Buffer.byteLength(viewOf(c).text),
      });
      const items = page.items.map(viewOf);
      const body = { data: items.map((i) => i.view), next_cursor: page.next, has_more: page.next !== null };
      const text = `{"data":[${items.map((i) => i.text).join(',')}],"next_cursor":${JSON.stringify(body.next_cursor)},"has_more":${body.has_more}}`;
      return withText(body, text);
    },
  );
};

export default routes;
