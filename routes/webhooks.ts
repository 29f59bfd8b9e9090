import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply } from 'fastify';
import { randomBytes } from 'node:crypto';
import { Conflict, NotFound, QuotaExceeded } from '../src/errors.js';
import { checkWebhookUrl } from '../src/webhooks/address-guard.js';
import { releaseAgents } from '../src/webhooks/attempt.js';
import {
  createWebhookBody,
  deliveriesQuery,
  patchWebhookBody,
  TEST_EVENT_TYPE,
  webhookIdParam,
  webhookView,
} from '../src/webhooks/schemas.js';
import { newSecret } from '../src/webhooks/secrets.js';
import type { WebhookRecord } from '../src/webhooks/keys.js';
import { emptyBody } from '../src/schemas.js';
import { ifMatchHeader, resolveIfMatch } from './mutations.js';
import { sealInRecord } from '../src/plugins/idempotency.js';
import {
  createdWebhook,
  deletedWebhook,
  deliveryList,
  errors,
  testDelivery,
  webhook,
  webhookList,
  routeErrors,
  type RouteCodes,
} from '../src/openapi/responses.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['webhook_not_found'] } as const satisfies RouteCodes;

/** Spec §6.3: a tenant's webhooks. Another tenant's webhook is 404 `webhook_not_found`. */

const newWebhookId = () => `wh_${randomBytes(12).toString('base64url').replace(/[-_]/g, '').slice(0, 16)}`;

/** null for a NotFound (a read of what may not exist), else the error thrown again. */
const unlessNotFound = (err: unknown): null => {
  if (err instanceof NotFound) return null;
  throw err;
};

function send(reply: FastifyReply, w: WebhookRecord, code = 200, extra: Record<string, unknown> = {}) {
  return reply
    .code(code)
    .header('etag', `"${w.revision}"`)
    .send({ ...webhookView(w), ...extra });
}

const routes: FastifyPluginAsyncZod = async (app) => {
  const tags = ['webhooks'];
  const { webhooks } = app;
  const store = webhooks.store;

  app.post(
    '/v1/webhooks',
    {
      schema: {
        operationId: 'createWebhook',
        summary: 'Register a webhook endpoint (its signing secret is shown only in this answer)',
        tags,
        body: createWebhookBody,
        response: { 201: createdWebhook, ...errors(400, 401, 409, 413, 415, 422, 429, 500, 503) },
      },
    },
    async (req, reply) => {
      // A keyed create is named after its key (src/store/idempotency.ts `appliedToken`): a retry whose first
      // request died between the write and its answer's record finds the webhook made, and answers it (with its
      // secret, opened from the record) instead of making a second one — before the URL is checked again (a DNS
      // answer that changed since would refuse the retry of a create that was made).
      const id = req.idempotency ? `wh_${req.idempotency.token}` : newWebhookId();
      const made = req.idempotency ? await store.get(req.tenant, id).catch(unlessNotFound) : null;
      if (made) {
        sealInRecord(req, 'secret');
        reply.header('idempotent-replayed', 'true');
        return send(reply, made, 201, { secret: webhooks.box.open(made.secret) });
      }
      const url = await checkWebhookUrl(req.body.url, webhooks.allowPrivate);
      const secret = newSecret();
      const now = Date.now();
      const w: WebhookRecord = {
        id,
        tenant: req.tenant,
        url: url.href,
        events: req.body.events ?? ['session.status'],
        description: req.body.description ?? null,
        secret: webhooks.box.seal(secret),
        createdAt: now,
        updatedAt: now,
        revision: 1,
        disabled: false,
        failingSince: null,
      };
      await store.create(w, webhooks.maxPerTenant);
      req.log.info({ webhook: w.id, tenant: w.tenant }, 'webhook created');
      // A replay of this create (Idempotency-Key) answers with the secret too; its record keeps it sealed.
      sealInRecord(req, 'secret');
      return send(reply, w, 201, { secret });
    },
  );

  app.get(
    '/v1/webhooks',
    {
      schema: {
        operationId: 'listWebhooks',
        summary: "The caller's webhook endpoints",
        tags,
        response: { 200: webhookList, ...errors(401, 500, 503) },
      },
    },
    async (req) => {
      const list = await store.list(req.tenant);
      return { data: list.map(webhookView), has_more: false };
    },
  );

  app.get(
    '/v1/webhooks/:id',
    {
      schema: {
        operationId: 'getWebhook',
        summary: 'A webhook endpoint',
        tags,
        params: webhookIdParam,
        response: { 200: webhook, ...routeErrors(NOT_FOUND, 400, 401, 404, 500, 503) },
      },
    },
    async (req, reply) => send(reply, await store.get(req.tenant, req.params.id)),
  );

  app.patch(
    '/v1/webhooks/:id',
    {
      schema: {
        operationId: 'updateWebhook',
        summary: 'Change, pause or re-enable a webhook endpoint',
        tags,
        params: webhookIdParam,
        body: patchWebhookBody,
        headers: ifMatchHeader,
        response: { 200: webhook, ...routeErrors(NOT_FOUND, 400, 401, 404, 412, 413, 415, 429, 500, 503) },
      },
    },
    async (req, reply) => {
      const b = req.body;
      const fields: Record<string, string> = { updated_at: String(Date.now()) };
      if (b.url !== undefined) fields['url'] = (await checkWebhookUrl(b.url, webhooks.allowPrivate)).href;
      if (b.events !== undefined) fields['events'] = JSON.stringify(b.events);
      if (b.description !== undefined) fields['description'] = b.description ?? '';
      if (b.disabled !== undefined) fields['disabled'] = b.disabled ? '1' : '0';
      const w = await store.patch(
        req.tenant,
        req.params.id,
        fields,
        await resolveIfMatch(req, async () => (await store.get(req.tenant, req.params.id)).revision),
      );
      // Sockets to the old URL are not kept (another replica's close after AGENT_IDLE_MS).
      if (b.url !== undefined) releaseAgents(w.id);
      // Enabled again (its kept messages made due by the store): claimed here at once.
      if (b.disabled === false) webhooks.kick(w.id);
      return send(reply, w);
    },
  );

  app.delete(
    '/v1/webhooks/:id',
    {
      schema: {
        operationId: 'deleteWebhook',
        summary: 'Delete a webhook endpoint',
        tags,
        params: webhookIdParam,
        headers: ifMatchHeader,
        response: {
          200: deletedWebhook,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 412, 413, 415, 429, 500, 503),
        },
      },
    },
    async (req) => {
      await store.remove(
        req.tenant,
        req.params.id,
        await resolveIfMatch(req, async () => (await store.get(req.tenant, req.params.id)).revision),
      );
      releaseAgents(req.params.id);
      return { id: req.params.id, object: 'webhook' as const, deleted: true as const };
    },
  );

  app.get(
    '/v1/webhooks/:id/deliveries',
    {
      schema: {
        operationId: 'listWebhookDeliveries',
        summary: 'Recent delivery attempts of a webhook endpoint',
        tags,
        params: webhookIdParam,
        querystring: deliveriesQuery,
        response: { 200: deliveryList, ...routeErrors(NOT_FOUND, 400, 401, 404, 500, 503) },
      },
    },
    async (req) => {
      await store.get(req.tenant, req.params.id);
      return { data: await store.outbox.deliveries(req.params.id, req.query.limit) };
    },
  );

  app.post(
    '/v1/webhooks/:id/test',
    {
      schema: {
        operationId: 'testWebhook',
        summary: 'Queue a `webhook.test` event for delivery to the endpoint',
        tags,
        params: webhookIdParam,
        body: emptyBody,
        response: {
          202: testDelivery,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 409, 413, 415, 422, 429, 500, 503),
        },
      },
    },
    async (req, reply) => {
      const w = await store.get(req.tenant, req.params.id);
      if (w.disabled)
        throw new Conflict('webhook_disabled', 'The webhook is disabled; PATCH {"disabled": false} first.');
      const msgId = `msg_test_${randomBytes(9).toString('base64url')}`;
      const body = JSON.stringify({
        id: msgId,
        session_id: null,
        type: TEST_EVENT_TYPE,
        at: new Date().toISOString(),
        revision: null,
        data: { webhook_id: w.id },
      });
      const r = await store.outbox.enqueue(w.id, [[msgId, body]], webhooks.maxPending);
      if (!r) throw new Conflict('webhook_disabled', 'The webhook is disabled.');
      // The outbox is full (WEBHOOK_MAX_PENDING, _BYTES): the test event was not queued.
      if (r.added === 0)
        throw new QuotaExceeded(
          'quota_exceeded',
          'The endpoint already keeps as many undelivered events as WEBHOOK_MAX_PENDING (or _BYTES) allows.',
          { quota: 'WEBHOOK_MAX_PENDING', limit: webhooks.maxPending.count },
        );
      webhooks.kick(w.id);
      return reply.code(202).send({ message_id: msgId, type: TEST_EVENT_TYPE });
    },
  );
};

export default routes;
