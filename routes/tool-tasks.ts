import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import {
  bodyTooLarge,
  claimedTasks,
  errors,
  taskAccepted,
  taskLease,
  routeErrors,
  type RouteCodes,
} from '../src/openapi/responses.js';
import { claimBody, taskIdParam, taskResultBody } from '../src/tenant-tools/schemas.js';
import type { Config } from '../src/config.js';
import { emptyBody } from '../src/schemas.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['task_not_found'] } as const satisfies RouteCodes;

/** The result route's body limit as its 413 names it (its message, its OpenAPI description). */
const RESULT_BODY_LIMIT = 'max(BODY_LIMIT, 2×TOOL_RESULT_MAX_BYTES)';

/** Spec §7.1: the worker protocol. A task of another tenant is 404 `task_not_found`. */
const routes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  const tags = ['tool-tasks'];
  const tasks = app.toolTasks;
  /**
   * Claims, heartbeats and results are counted apart from the tenant's other mutating requests (RATE_LIMIT_PER_MIN,
   * src/plugins/ratelimit.ts), with ten times its budget: a fleet holding a few hundred tasks heartbeats every third
   * of a lease and claims once a task at least, and in the tenant's one count it would use it all — its heartbeats
   * refused, its leases lapsing, and the tenant's session API refused with them. Each of the three routes has a
   * count of its own (@fastify/rate-limit keeps a route's own limit in a store of its own, its keys prefixed by the
   * route's method and URL): a fleet polling hard uses up its claims, never the renewals of the leases it holds.
   */
  const workerRate =
    config.RATE_LIMIT_PER_MIN > 0
      ? {
          rateLimit: {
            max: 10 * config.RATE_LIMIT_PER_MIN,
            keyGenerator: (req: FastifyRequest) => `{${req.tenant}}:tasks`,
          },
        }
      : {};

  /**
   * The claims in flight, each until its answer is written (or its socket closes). On shutdown the server destroys
   * every connection once its `preClose` hooks are done (`forceCloseConnections`): a claim still waiting then was cut
   * with a socket error. So, first, every waiting claim answers `{"tasks": []}` at once (`closeClaims`: no task taken
   * for a worker that would not get it), and the close waits for those answers to be written, as the WebSockets get
   * their 1001 first — at most SHUTDOWN_GRACE_MS, for a claim whose own script Redis holds up.
   */
  const inFlight = new Set<Promise<void>>();
  app.addHook('preClose', async () => {
    tasks.closeClaims();
    if (inFlight.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, config.SHUTDOWN_GRACE_MS);
      timer.unref();
    });
    await Promise.race([Promise.all(inFlight), grace]);
    clearTimeout(timer);
  });

  app.post(
    '/v1/tool-tasks/claim',
    {
      config: workerRate,
      schema: {
        operationId: 'claimToolTasks',
        summary: 'Claim calls of the given tenant tools (long-poll up to wait_ms); each comes with a lease',
        tags,
        body: claimBody,
        response: { 200: claimedTasks, ...errors(400, 401, 409, 413, 415, 422, 429, 500, 503) },
      },
    },
    async (req, reply) => {
      const written = new Promise<void>((resolve) => {
        reply.raw.once('finish', resolve);
        reply.raw.once('close', resolve);
      });
      inFlight.add(written);
      void written.then(() => inFlight.delete(written));
      // A worker gone mid-wait (its socket closed) takes no task: the answer's `close` before it was sent says so
      // (the request's own `close` fires once its body is read).
      const abort = new AbortController();
      const onClose = () => abort.abort();
      reply.raw.once('close', onClose);
      try {
        const claimed = await tasks.claim(req.tenant, req.body, abort.signal);
        // The leases' clock (Redis's) in `Date`: a worker takes `lease_expires_at` less `Date` as the lease.
        if (claimed[0]) reply.header('date', tasks.leaseDate(claimed[0].lease_expires_at));
        return { tasks: claimed };
      } finally {
        reply.raw.off('close', onClose);
      }
    },
  );

  app.post(
    '/v1/tool-tasks/:id/heartbeat',
    {
      config: workerRate,
      schema: {
        operationId: 'heartbeatToolTask',
        summary: 'Renew the lease of a claimed task',
        tags,
        params: taskIdParam,
        body: emptyBody,
        response: {
          200: taskLease,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 409, 413, 415, 422, 429, 500, 503),
        },
      },
    },
    async (req, reply) => {
      const renewed = await tasks.heartbeat(req.tenant, req.params.id);
      return reply.header('date', tasks.leaseDate(renewed.lease_expires_at)).send(renewed);
    },
  );

  app.post(
    '/v1/tool-tasks/:id/result',
    {
      // Room for a result somewhat over TOOL_RESULT_MAX_BYTES (it becomes an is_error naming the limit) where
      // BODY_LIMIT alone (the same 1 MiB by default) would answer every such body 413.
      bodyLimit: Math.max(config.BODY_LIMIT, 2 * config.TOOL_RESULT_MAX_BYTES),
      config: { ...workerRate, bodyLimitName: RESULT_BODY_LIMIT },
      schema: {
        operationId: 'submitToolTaskResult',
        summary: 'The result of a claimed task',
        tags,
        params: taskIdParam,
        body: taskResultBody,
        response: {
          200: taskAccepted,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 409, 413, 415, 422, 429, 500, 503),
          413: bodyTooLarge(RESULT_BODY_LIMIT),
        },
      },
    },
    async (req) => {
      await tasks.submit(req.tenant, req.params.id, req.body);
      return { id: req.params.id, accepted: true as const };
    },
  );
};

export default routes;
