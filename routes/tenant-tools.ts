import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { notFound } from '../src/errors.js';
import { HttpRefusal } from '../src/plugins/error-status.js';
import {
  codesOfStatus,
  deletedTool,
  toolByName,
  tenantTool,
  routeErrors,
  type RouteCodes,
} from '../src/openapi/responses.js';
import { toolView } from '../src/tenant-tools/registry.js';
import { putToolBody, toolNameParam } from '../src/tenant-tools/schemas.js';
import type { TenantToolDef } from '../src/tenant-tools/types.js';
import { checkWebhookUrl } from '../src/webhooks/address-guard.js';
import { ifMatchHeader, resolveIfMatch } from './mutations.js';
import { newSecret } from '../src/webhooks/secrets.js';
import { sealInRecord } from '../src/plugins/idempotency.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['tool_not_found'] } as const satisfies RouteCodes;

/**
 * Spec §7.1: a tenant's own tools. Another tenant's tool is 404 `tool_not_found`. GET of a tool that is not the
 * tenant's answers its `GET /v1/tools` entry; DELETE of one is 409.
 */
const routes: FastifyPluginAsyncZod = async (app) => {
  const tags = ['tools'];
  const registry = app.tenantTools;
  /** A server tool's name is not the tenant's to register or remove: 409, as a PUT of it is (§7.1). */
  const refuseServerToolName = (name: string, advice: string) => {
    if (app.toolbox.reservedNames().has(name))
      throw new HttpRefusal(
        'tool_name_conflict',
        `"${name}" is the name of a server tool; ${advice}.`,
        { tool: name },
        undefined,
        409,
      );
  };

  /** A tool as PUT answers it: `secret` (an http runner's, made by this PUT) shown once, kept sealed in a record. */
  const sendPut = (
    req: FastifyRequest,
    reply: FastifyReply,
    code: 200 | 201,
    def: TenantToolDef,
    secret: string | undefined,
  ) => {
    // A replay of this PUT (Idempotency-Key) answers with the secret too; its record keeps it sealed.
    sealInRecord(req, 'secret');
    return reply
      .code(code)
      .header('etag', `"${def.revision ?? 1}"`)
      .send({ ...toolView(def), ...(secret !== undefined ? { secret } : {}) });
  };

  app.put(
    '/v1/tools/:name',
    {
      // As a create POST does (spec §7: §3's rule): a PUT whose answer was lost is sent again with its key and gets
      // that answer, the secret it showed included, not a replace's 200 without one.
      config: { idempotencyKey: true },
      schema: {
        operationId: 'putTool',
        summary:
          'Register or replace a tenant tool (an http runner’s signing secret is shown only when it is made)',
        description:
          'With an `Idempotency-Key` (honoured here as on every POST), the same key and body answer the first answer again, its `secret` included, for IDEMPOTENCY_TTL_S; a PUT whose answer was lost gets its secret back by sending it again with its key.',
        tags,
        params: toolNameParam,
        body: putToolBody,
        headers: ifMatchHeader,
        response: {
          200: tenantTool,
          201: tenantTool,
          ...routeErrors(
            { 409: [...codesOfStatus(409), 'tool_name_conflict'] },
            400,
            401,
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
      const { name } = req.params;
      refuseServerToolName(name, 'name the tool otherwise');
      // A keyed PUT is recorded with its token in the tool (src/store/idempotency.ts `appliedToken`): a retry whose
      // first request died between the write and its answer's record finds the tool as it wrote it and answers as it
      // did (with the secret it made, opened from the tool), instead of replacing it with a 200 without the secret —
      // before If-Match (the revision moved with that write) and the URL are checked again.
      const token = req.idempotency?.token;
      const made = token === undefined ? null : await registry.get(req.tenant, name);
      if (made?.applied && made.applied.token === token) {
        reply.header('idempotent-replayed', 'true');
        const shown =
          made.applied.secret_made && made.secret ? app.webhooks.box.open(made.secret) : undefined;
        return sendPut(req, reply, made.applied.created ? 201 : 200, made, shown);
      }
      const body = req.body;
      let runner = body.runner;
      // A replaced http tool keeps its secret; a new one (or one that was a worker tool) takes this one, shown once.
      // Whether it has one is known only in the script that writes it (two PUTs may make the tool at once).
      let secret: string | undefined;
      if (runner.type === 'http') {
        const url = await checkWebhookUrl(runner.url, app.webhooks.allowPrivate);
        runner = { ...runner, url: url.href };
        secret = newSecret();
      }
      const now = Date.now();
      const def: Omit<TenantToolDef, 'revision' | 'created_at' | 'secret' | 'applied'> = {
        name,
        description: body.description,
        input_schema: body.input_schema,
        runner,
        idempotent: body.idempotent,
        read_only: body.read_only,
        timeout_ms: body.timeout_ms,
        max_attempts: body.max_attempts,
        updated_at: now,
      };
      const { created, revision, createdAt, secretMade } = await registry.put(req.tenant, def, {
        now,
        sealed: secret === undefined ? undefined : app.webhooks.box.seal(secret),
        ifMatch: await resolveIfMatch(
          req,
          async () => (await registry.get(req.tenant, req.params.name))?.revision ?? null,
        ),
        applied: token,
      });
      return sendPut(
        req,
        reply,
        created ? 201 : 200,
        { ...def, created_at: createdAt, revision },
        secretMade ? secret : undefined,
      );
    },
  );

  app.get(
    '/v1/tools/:name',
    {
      schema: {
        operationId: 'getTool',
        summary: 'A tool the tenant may use, by name',
        description:
          "A tenant tool (with its workers, `ETag` its revision); else a server tool, the memory tool or a tool of an MCP server the tenant may use, as `GET /v1/tools` lists it. 404 `tool_not_found` for any other name, another tenant's tool, or a tool of an MCP server that never answered.",
        tags,
        params: toolNameParam,
        response: {
          200: toolByName,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 429, 500, 503),
        },
      },
    },
    async (req, reply) => {
      const def = await registry.get(req.tenant, req.params.name);
      if (!def) {
        // Not the tenant's: the tool GET /v1/tools lists under that name, if any (spec §7.1: it lists them all).
        const listed = await app.toolbox.listed(req.tenant, req.params.name);
        if (!listed) throw notFound('tool');
        return listed;
      }
      const workers = def.runner.type === 'worker' ? await app.toolTasks.queue.workers(req.tenant) : null;
      reply.header('etag', `"${def.revision ?? 1}"`);
      return {
        ...toolView(def),
        ...(workers ? { workers: workers.get(def.name) ?? { active: 0, last_seen_at: null } } : {}),
      };
    },
  );

  app.delete(
    '/v1/tools/:name',
    {
      schema: {
        operationId: 'deleteTool',
        summary: 'Remove a tenant tool (sessions already using it keep their copy)',
        description:
          "A name that is no tenant tool but a server tool, the memory tool or a tool of an MCP server the tenant may use is 409 `tool_name_conflict`: it is not the tenant's to remove. Any other name is 404 `tool_not_found`.",
        tags,
        params: toolNameParam,
        headers: ifMatchHeader,
        response: {
          200: deletedTool,
          ...routeErrors(
            { ...NOT_FOUND, 409: [...codesOfStatus(409), 'tool_name_conflict'] },
            400,
            401,
            404,
            409,
            412,
            413,
            415,
            429,
            500,
            503,
          ),
        },
      },
    },
    async (req) => {
      refuseServerToolName(
        req.params.name,
        'server tools cannot be removed (a session leaves one out of its `tools`)',
      );
      if (
        !(await registry.remove(
          req.tenant,
          req.params.name,
          await resolveIfMatch(
            req,
            async () => (await registry.get(req.tenant, req.params.name))?.revision ?? null,
          ),
        ))
      ) {
        // Listed by GET /v1/tools (and answered by GET of the name) but not the tenant's: 409 as for a server tool.
        const listed = await app.toolbox.listed(req.tenant, req.params.name);
        if (listed?.source === 'mcp')
          throw new HttpRefusal(
            'tool_name_conflict',
            `"${req.params.name}" is a tool of the MCP server "${listed.mcp_server}"; it is not a tenant tool and cannot be removed here (a session leaves it out with \`allowed_tools\`).`,
            { tool: req.params.name, mcp_server: listed.mcp_server },
            undefined,
            409,
          );
        throw notFound('tool');
      }
      return { name: req.params.name, deleted: true as const };
    },
  );
};

export default routes;
