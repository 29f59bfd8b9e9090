import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { MCP_SERVER_NAME } from '../src/mcp/config.js';
import { checkWebhookUrl } from '../src/webhooks/address-guard.js';
import { errors, routeErrors, type RouteCodes } from '../src/openapi/responses.js';
import { ifMatchHeader, resolveIfMatch } from './mutations.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['mcp_server_not_found'] } as const satisfies RouteCodes;

/** Spec §7.1: a tenant's own MCP servers. Another tenant's server is 404 `mcp_server_not_found`. */

/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/;
/** Header values: visible ASCII, spaces and tabs (no CR/LF). */
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;
/** Headers the MCP transport sets itself, or that would change the connection. */
const RESERVED_HEADERS = new Set([
  'host',
  'content-length',
  'content-type',
  'accept',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'upgrade',
  'trailer',
  'proxy-authorization',
  'last-event-id',
  'mcp-session-id',
  'mcp-protocol-version',
]);
const MAX_HEADERS = 32;
const MAX_HEADER_BYTES = 16_384;

const nameParam = z.strictObject({
  name: z.string().regex(MCP_SERVER_NAME, 'MCP server names are 1-64 of [A-Za-z0-9_-]'),
});

const putBody = z.strictObject({
  url: z.string().min(1).max(2048),
  headers: z
    .record(
      z.string().regex(HEADER_NAME, 'an HTTP header name'),
      z.string().max(8192).regex(HEADER_VALUE, 'visible ASCII, no line breaks'),
    )
    .superRefine((h, ctx) => {
      const names = Object.keys(h);
      if (names.length > MAX_HEADERS)
        ctx.addIssue({ code: 'custom', message: `at most ${MAX_HEADERS} headers` });
      const lower = new Set<string>();
      for (const n of names) {
        const l = n.toLowerCase();
        if (RESERVED_HEADERS.has(l))
          ctx.addIssue({
            code: 'custom',
            path: [n],
            message: 'set by the MCP transport; not a header to give',
          });
        if (lower.has(l))
          ctx.addIssue({ code: 'custom', path: [n], message: 'given twice (names are case-blind)' });
        lower.add(l);
      }
      const bytes = names.reduce((n, k) => n + k.length + Buffer.byteLength(h[k]!), 0);
      if (bytes > MAX_HEADER_BYTES)
        ctx.addIssue({
          code: 'custom',
          message: `the headers are ${bytes} bytes; at most ${MAX_HEADER_BYTES}`,
        });
    })
    .optional()
    .meta({
      description: 'Sent with every request to the server (e.g. `authorization`); sealed, never returned.',
    }),
});

const mcpServer = z
  .object({
    name: z.string(),
    object: z.literal('mcp_server'),
    url: z.string(),
    headers: z
      .record(z.string(), z.literal('[redacted]'))
      .meta({ description: 'The header names given; their values are never shown.' }),
    created_at: z.string(),
    updated_at: z.string(),
    revision: z.number().int(),
  })
  .meta({ id: 'McpServer' });
const mcpServerList = z
  .object({ data: z.array(mcpServer), has_more: z.boolean() })
  .meta({ id: 'McpServerList' });
const deletedMcpServer = z
  .object({ name: z.string(), object: z.literal('mcp_server'), deleted: z.literal(true) })
  .meta({ id: 'DeletedMcpServer' });

const routes: FastifyPluginAsyncZod = async (app) => {
  const tags = ['mcp-servers'];
  const store = app.mcp.tenants;
  const allowPrivate = app.webhooks.allowPrivate;
  const shown = <T extends object>(v: T) => ({ ...v, object: 'mcp_server' as const });

  app.put(
    '/v1/mcp-servers/:name',
    {
      schema: {
        operationId: 'putMcpServer',
        summary: "Register or replace one of the tenant's MCP servers (Streamable HTTP)",
        description:
          'Sessions name it in `tools` as `{"mcp_server": "<name>"}`; the tenant\'s server is used before an operator\'s of the same name. The URL follows the webhooks\' address rules; the headers are sealed and never returned.',
        tags,
        params: nameParam,
        body: putBody,
        headers: ifMatchHeader,
        response: { 200: mcpServer, 201: mcpServer, ...errors(400, 401, 412, 413, 415, 429, 500, 503) },
      },
    },
    async (req, reply) => {
      const url = await checkWebhookUrl(req.body.url, allowPrivate);
      const { created, server } = await store.put(
        req.tenant,
        req.params.name,
        url.href,
        req.body.headers ?? {},
        await resolveIfMatch(
          req,
          async () => (await store.get(req.tenant, req.params.name))?.revision ?? null,
        ),
      );
      req.log.info({ tenant: req.tenant, mcp_server: server.name, created }, 'tenant MCP server put');
      return reply
        .code(created ? 201 : 200)
        .header('etag', `"${server.revision}"`)
        .send(shown(server));
    },
  );

  app.get(
    '/v1/mcp-servers',
    {
      schema: {
        operationId: 'listMcpServers',
        summary: "The tenant's own MCP servers",
        tags,
        response: { 200: mcpServerList, ...errors(401, 429, 500, 503) },
      },
    },
    async (req) => ({ data: (await store.list(req.tenant)).map(shown), has_more: false }),
  );

  app.get(
    '/v1/mcp-servers/:name',
    {
      schema: {
        operationId: 'getMcpServer',
        summary: "One of the tenant's MCP servers",
        tags,
        params: nameParam,
        response: { 200: mcpServer, ...routeErrors(NOT_FOUND, 400, 401, 404, 429, 500, 503) },
      },
    },
    async (req, reply) => {
      const server = await store.view(req.tenant, req.params.name);
      return reply.header('etag', `"${server.revision}"`).send(shown(server));
    },
  );

  app.delete(
    '/v1/mcp-servers/:name',
    {
      schema: {
        operationId: 'deleteMcpServer',
        summary:
          "Forget one of the tenant's MCP servers (sessions naming it lose its tools at their next step)",
        tags,
        params: nameParam,
        headers: ifMatchHeader,
        response: {
          200: deletedMcpServer,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 412, 413, 415, 429, 500, 503),
        },
      },
    },
    async (req) => {
      await store.delete(
        req.tenant,
        req.params.name,
        await resolveIfMatch(
          req,
          async () => (await store.get(req.tenant, req.params.name))?.revision ?? null,
        ),
      );
      req.log.info({ tenant: req.tenant, mcp_server: req.params.name }, 'tenant MCP server deleted');
      return { name: req.params.name, object: 'mcp_server' as const, deleted: true as const };
    },
  );
};

export default routes;
