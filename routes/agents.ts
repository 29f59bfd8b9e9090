import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { sessionList, routeErrors, type RouteCodes } from '../src/openapi/responses.js';
import { sessionIdParam } from '../src/schemas.js';
import { viewFor } from './mutations.js';
import type { SessionState } from '../src/store/session-state.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['session_not_found'] } as const satisfies RouteCodes;

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
        tags: ['sessions'],
        params: sessionIdParam,
        response: { 200: sessionList, ...routeErrors(NOT_FOUND, 400, 401, 403, 404, 500, 503) },
      },
    },
    async (req) => {
      const s = await app.store.loadFor(req.tenant, req.params.id);
      const ids = await app.agents.children(s.id);
      const states = await Promise.all(ids.map((id) => app.store.load(id)));
      const data = states.filter((c): c is SessionState => c !== null && c.tenant === req.tenant);
      return { data: data.map((s) => viewFor(req, s)), next_cursor: null, has_more: false };
    },
  );
};

export default routes;
