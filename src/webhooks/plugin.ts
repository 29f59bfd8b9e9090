import fp from 'fastify-plugin';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Config } from '../config.js';
import { COMMAND_TIMEOUT_MS } from '../plugins/redis.js';
import { closeAgents } from './attempt.js';
import { Dispatcher } from './dispatcher.js';
import { Fanout } from './fanout.js';
import { parseSecretKey, SecretBox } from './secrets.js';
import { WebhookStore } from './store.js';
import { createTap, Interest } from './tap.js';
import type { PendingBounds } from './outbox.js';
import { componentLog } from '../log.js';
import { retryWhileUnavailable } from '../store/unavailable.js';

/** How long a boot waits for the webhook interest to load while Redis does not answer. */
const BOOT_LOAD_MS = 15_000;

declare module 'fastify' {
  interface FastifyInstance {
    webhooks: {
      store: WebhookStore;
      box: SecretBox;
      allowPrivate: boolean;
      maxPerTenant: number;
      maxPending: PendingBounds;
      /** Claims the endpoint's due messages in this process now. */
      kick(webhookId: string): void;
      /** Whether this process's interest cache has an enabled webhook of `tenant` for `type` (what the tap sees). */
      listens(tenant: string, type: string): boolean;
    };
  }
}

/** Entries kept in each endpoint's deliveries log. */
const LOG_MAX = 200;
/** Attempts in flight at once in one process. */
const PROCESS_MAX = 64;

/**
 * Webhooks (spec §6.3): the store, the tap on the session store's event writes, the fan-out and the dispatcher
 * (see tap.ts for how events reach the outboxes). Every replica drains every outbox. Stops before Redis closes.
 */
export default fp<{ config: Config }>(
  async (app, { config }) => {
    const log = componentLog(app.log, 'webhooks');
    const store = new WebhookStore(app.redis);
    const box = new SecretBox(
      config.WEBHOOK_SECRET_KEY ? parseSecretKey(config.WEBHOOK_SECRET_KEY) : undefined,
    );
    const owner = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
    const graceMs = config.WEBHOOK_SWEEP_GRACE_MS;
    const pendingBounds: PendingBounds = {
      count: config.WEBHOOK_MAX_PENDING,
      bytes: config.WEBHOOK_MAX_PENDING_BYTES,
    };
    // Marks are refreshed well within the grace (see tap.ts): grace ≥ refresh + command timeout + skew.
    const refreshMs = Math.max(100, Math.min(5000, Math.floor((graceMs - COMMAND_TIMEOUT_MS) / 2)));
    const interest = new Interest(store);
    // The callbacks below refer to `fanout` and `dispatcher`, built next; none is called before both exist.
    const tapped = createTap({
      store,
      interest,
      isCluster: app.redis.isCluster,
      refreshMs,
      log,
      kick: (id) => fanout.kick(id),
    });
    const fanout = new Fanout({
      store,
      owner,
      maxPending: pendingBounds,
      log,
      tenantOf: tapped.tenantOf,
      enqueued: (id) => dispatcher.kick(id),
      graceMs,
    });
    const dispatcher = new Dispatcher({
      store,
      fanout,
      box,
      log,
      pollMs: config.WEBHOOK_POLL_MS,
      graceMs,
      timeoutMs: config.WEBHOOK_TIMEOUT_MS,
      retryBaseMs: config.WEBHOOK_RETRY_BASE_MS,
      retryMaxMs: config.WEBHOOK_RETRY_MAX_MS,
      allowPrivate: config.WEBHOOK_ALLOW_PRIVATE,
      processMax: PROCESS_MAX,
      metrics: app.metrics,
      limits: {
        maxPending: config.WEBHOOK_MAX_PENDING,
        // An attempt ends within its timeout; the margin covers the settle and a busy event loop.
        leaseMs: config.WEBHOOK_TIMEOUT_MS + 5000,
        concurrency: config.WEBHOOK_CONCURRENCY,
        retryForMs: config.WEBHOOK_RETRY_FOR_MS,
        disableAfterMs: config.WEBHOOK_RETRY_FOR_MS,
        logMax: LOG_MAX,
      },
    });

    // The interest cache follows changes published by any replica, and is reloaded whole after a reconnection
    // (messages sent while the subscriber was away are lost).
    const unfollow = await store.followChanges(
      app.redisSub,
      (tenant) => {
        interest
          .loadTenant(tenant)
          .catch((err: unknown) => log.warn({ err }, 'webhook interest reload failed'));
      },
      () => {
        interest.loadAll().catch((err: unknown) => log.warn({ err }, 'webhook interest reload failed'));
      },
    );
    await retryWhileUnavailable(
      () => interest.loadAll(),
      BOOT_LOAD_MS,
      (err) => log.warn({ err }, 'webhook interest not loaded yet; trying again'),
    );
    app.store.eventTap = tapped.tap;
    const reload = tapped.reloadEvery();

    app.decorate('webhooks', {
      store,
      box,
      allowPrivate: config.WEBHOOK_ALLOW_PRIVATE,
      maxPerTenant: config.WEBHOOK_MAX_PER_TENANT,
      maxPending: pendingBounds,
      kick: (id: string) => dispatcher.kick(id),
      listens: (tenant: string, type: string) => interest.listens([type], tenant),
    });
    app.addHook('onReady', async () => dispatcher.start());
    // Registered after the redis and engine plugins: runs before them on close, while Redis is still there.
    app.addHook('onClose', async () => {
      clearInterval(reload);
      app.store.eventTap = undefined;
      fanout.close();
      await dispatcher.stop();
      unfollow();
      closeAgents();
    });
  },
  { name: 'webhooks', dependencies: ['redis', 'engine', 'metrics'] },
);
