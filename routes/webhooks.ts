import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply } from 'fastify';
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { AppError } from '../src/errors.js';
import { checkWebhookUrl } from '../src/webhooks/address-guard.js';
import {
  createWebhookBody,
  deliveriesQuery,
  patchWebhookBody,
  TEST_EVENT_TYPE,
  webhookIdParam,
  webhookView,
} from '../src/webhooks/schemas.js';
import { newSecret } from '../src/webhooks/secrets.js';
import type { WebhookRecord } from '../src/webhooks/store.js';
import { parseIfMatch } from './sessions.js';

/** Spec §6.3: a tenant's webhooks. Another tenant's webhook is 404 `webhook_not_found`. */

const ifMatchHeader = z.looseObject({
  'if-match': z
    .string()
    .regex(/^(W\/)?"?\d+"?$/, 'If-Match takes the revision from the ETag, e.g. "3"')
    .optional(),
});

const newWebhookId = () => `wh_${randomBytes(12).toString('base64url').replace(/[-_]/g, '').slice(0, 16)}`;

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

  app.post('/v1/webhooks', { schema: { tags, body: createWebhookBody } }, async (req, reply) => {
    const url = await checkWebhookUrl(req.body.url, webhooks.allowPrivate);
    const secret = newSecret();
    const now = Date.now();
    const w: WebhookRecord = {
      id: newWebhookId(),
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
    return send(reply, w, 201, { secret });
  });

  app.get('/v1/webhooks', { schema: { tags } }, async (req) => {
    const list = await store.list(req.tenant);
    return { data: list.map(webhookView), has_more: false };
  });

  app.get('/v1/webhooks/:id', { schema: { tags, params: webhookIdParam } }, async (req, reply) =>
    send(reply, await store.get(req.tenant, req.params.id)),
  );

  app.patch(
    '/v1/webhooks/:id',
    { schema: { tags, params: webhookIdParam, body: patchWebhookBody, headers: ifMatchHeader } },
    async (req, reply) => {
      const b = req.body;
      const fields: Record<string, string> = { updated_at: String(Date.now()) };
      if (b.url !== undefined) fields.url = (await checkWebhookUrl(b.url, webhooks.allowPrivate)).href;
      if (b.events !== undefined) fields.events = JSON.stringify(b.events);
      if (b.description !== undefined) fields.description = b.description ?? '';
      if (b.disabled !== undefined) fields.disabled = b.disabled ? '1' : '0';
      const w = await store.patch(req.tenant, req.params.id, fields, parseIfMatch(req));
      return send(reply, w);
    },
  );

  app.delete(
    '/v1/webhooks/:id',
    { schema: { tags, params: webhookIdParam, headers: ifMatchHeader } },
    async (req) => {
      await store.remove(req.tenant, req.params.id, parseIfMatch(req));
      return { id: req.params.id, object: 'webhook', deleted: true };
    },
  );

  app.get(
    '/v1/webhooks/:id/deliveries',
    { schema: { tags, params: webhookIdParam, querystring: deliveriesQuery } },
    async (req) => {
      await store.get(req.tenant, req.params.id);
      return { data: await store.deliveries(req.params.id, req.query.limit) };
    },
  );

  app.post('/v1/webhooks/:id/test', { schema: { tags, params: webhookIdParam } }, async (req, reply) => {
    const w = await store.get(req.tenant, req.params.id);
    if (w.disabled)
      throw new AppError(
        409,
        'webhook_disabled',
        'The webhook is disabled; PATCH {"disabled": false} first.',
      );
    const msgId = `msg_test_${randomBytes(9).toString('base64url')}`;
    const body = JSON.stringify({
      id: msgId,
      session_id: null,
      type: TEST_EVENT_TYPE,
      at: new Date().toISOString(),
      revision: null,
      data: { webhook_id: w.id },
    });
    const r = await store.enqueue(w.id, [[msgId, body]], Date.now(), webhooks.maxPending);
    if (!r) throw new AppError(409, 'webhook_disabled', 'The webhook is disabled.');
    webhooks.kick(w.id);
    return reply.code(202).send({ message_id: msgId, type: TEST_EVENT_TYPE });
  });
};

export default routes;
