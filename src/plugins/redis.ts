import fp from 'fastify-plugin';
import { Cluster, type ClusterOptions, type Redis, type RedisOptions } from 'ioredis';
import { redisErrorKind } from '../observability/metrics.js';
import { componentLog } from '../log.js';
import { guardRedis } from '../redis/health.js';
import { StoreCluster, StoreRedis } from '../store/unavailable.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Commands (store, engine). */
    redis: Redis | Cluster;
    /** A second connection in subscriber mode (run control, event notifications). */
    redisSub: Redis | Cluster;
  }
}

export interface RedisPluginOptions {
  url?: string | undefined;
  clusterNodes?: Array<{ host: string; port: number }> | undefined;
  /** How long the plugin waits for a Redis Cluster to be ready at boot (ms). Default 10 s. */
  clusterReadyTimeoutMs?: number | undefined;
  /** REDIS_KEY_PREFIX: put before every key by the client (ioredis `keyPrefix`); channels: keys.ts `channelName`. */
  keyPrefix?: string | undefined;
}

/**
 * How the clients behave while Redis is unreachable, so that a route answers 503 `store_unavailable` in bounded time
 * and nothing ever runs twice:
 *
 * - `commandTimeout`: a command without an answer fails after 3 s (a hung server, a partition).
 * - `maxRetriesPerRequest: 0`: commands waiting for a connection fail at the first failed (re)connection attempt,
 *   which comes within `RECONNECT_MAX_MS` or `connectTimeout`, both shorter than the command timeout. So a command
 *   that timed out is never still queued and sent later, after the caller was told it failed.
 * - `autoResendUnfulfilledCommands: false`: a command sent on a connection that dropped before its answer is failed,
 *   never sent again on the new connection. Its effect is unknown (it may have run); sending it again could apply a
 *   write twice. The store's writes are guarded Lua scripts, and the engine reads the state back before going on.
 * - The client reconnects by itself, backing off up to `RECONNECT_MAX_MS`; a service recovers without a restart.
 * - A Redis that hangs (the connection stays open) is found by src/redis/health.ts's probe within ~1 s; from then on
 *   commands are refused at once (→ 503) instead of each waiting out the command timeout.
 * - Every such failure reaches the caller of a command as `StoreUnavailable` (the clients are src/store/unavailable.ts's
 *   `StoreRedis` and `StoreCluster`): nothing above the clients reads a Redis error to know the store is down.
 */
export const COMMAND_TIMEOUT_MS = 3000;
const CONNECT_TIMEOUT_MS = 2000;
const RECONNECT_MAX_MS = 500;

const reconnect = (times: number) => Math.min(50 * 2 ** times, RECONNECT_MAX_MS);

export const redisOptions: RedisOptions = {
  commandTimeout: COMMAND_TIMEOUT_MS,
  connectTimeout: CONNECT_TIMEOUT_MS,
  maxRetriesPerRequest: 0,
  autoResendUnfulfilledCommands: false,
  enableAutoPipelining: true,
  // The scripts with a variable key count (`<name>.lua`, called with the count first) are never auto-pipelined: on a
  // cluster ioredis routes an auto-pipelined command by its first argument, here the count and not a key, so the
  // script joined the pipeline of another node and the whole pipeline failed ("All keys in the pipeline should
  // belong to the same slots allocation group": ioredis issue 2109). Sent alone, the cluster routes them by KEYS.
  // The stream relays' shared write (SessionStore.appendEventsMany) is one command per flush already: sent at once,
  // it costs no auto-pipeline (a Pipeline object, a setImmediate) per flush. Nothing it carries must follow a command
  // of the same tick (a webhook mark goes by another command), so it may overtake the auto-pipeline being gathered.
  autoPipeliningIgnoredCommands: ['sessAppendEventsMany', 'whUpdate'],
  retryStrategy: reconnect,
};

/** A subscriber waits for messages: no command timeout; it re-subscribes by itself after a reconnection. */
const { commandTimeout: _commandTimeout, ...subscriberOptions } = redisOptions;

/**
 * Cluster clients. Keys of one session share a hash tag (one slot); the global keys (`runs:due`, tenant indexes,
 * idempotency records) are single-key commands, so nothing crosses slots. While the cluster is unreachable a
 * Cluster client would queue commands without any timeout, so the offline queue is turned off once the client is
 * ready (see `createRedis`): then commands fail at once with "Cluster isn't ready" (→ 503). Commands sent to a node
 * that went away are retried on the refreshed topology (`retryDelayOnFailover`, at most `maxRedirections` times).
 */
function clusterOptions(base: RedisOptions): ClusterOptions {
  const {
    retryStrategy: _r,
    enableAutoPipelining: _p,
    autoPipeliningIgnoredCommands,
    keyPrefix,
    ...nodeOptions
  } = base;
  return {
    redisOptions: nodeOptions,
    // The cluster client is the one that auto-pipelines: the commands kept out of it are set on it.
    ...(autoPipeliningIgnoredCommands ? { autoPipeliningIgnoredCommands } : {}),
    // The cluster client builds the commands (and so prefixes their keys); its node clients only send them.
    keyPrefix: keyPrefix ?? '',
    enableAutoPipelining: true,
    enableOfflineQueue: true,
    clusterRetryStrategy: reconnect,
    retryDelayOnFailover: 200,
    retryDelayOnClusterDown: 300,
    retryDelayOnTryAgain: 200,
    maxRedirections: 8,
    slotsRefreshTimeout: 2000,
  };
}

export function createRedis(
  opts: RedisPluginOptions,
  role: 'commands' | 'subscriber' = 'commands',
): Redis | Cluster {
  const base = {
    ...(role === 'commands' ? redisOptions : subscriberOptions),
    keyPrefix: opts.keyPrefix ?? '',
  };
  if (opts.clusterNodes?.length) {
    const cluster = new StoreCluster(opts.clusterNodes, clusterOptions(base));
    // Queue commands only until the first `ready` (boot); from then on a cluster outage fails commands at once.
    cluster.once('ready', () => {
      cluster.options.enableOfflineQueue = false;
    });
    return cluster;
  }
  return new StoreRedis(opts.url ?? 'redis://127.0.0.1:6379', base);
}

/** Resolves once a Cluster client is ready; rejects after `timeoutMs`. */
function clusterReady(cluster: Cluster, timeoutMs: number): Promise<void> {
  if (cluster.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cluster.off('ready', onReady);
      reject(new Error(`The Redis Cluster was not ready within ${timeoutMs} ms (status ${cluster.status}).`));
    }, timeoutMs);
    const onReady = () => {
      clearTimeout(timer);
      resolve();
    };
    cluster.once('ready', onReady);
  });
}

export default fp<RedisPluginOptions>(
  async (app, opts) => {
    const redis = createRedis(opts, 'commands');
    const sub = createRedis(opts, 'subscriber');
    const log = componentLog(app.log, 'redis');
    for (const [name, conn] of [
      ['redis', redis],
      ['redis-sub', sub],
    ] as const) {
      // One warning when the connection is lost and one line when it is back, not one per reconnection attempt.
      // A connection's `error` events are not a command's failure, so they carry ioredis's own errors (the metric's
      // kind is read from their code); no request waits on them: its command fails with StoreUnavailable.
      let down = false;
      let failures = 0;
      conn.on('error', (err: Error) => {
        app.metrics.redisErrors.inc({ kind: redisErrorKind(err) });
        failures++;
        if (!down) log.warn({ err, conn: name }, 'redis connection lost; reconnecting');
        down = true;
      });
      conn.on('ready', () => {
        if (down) log.info({ conn: name, failures }, 'redis connection restored');
        down = false;
        failures = 0;
      });
    }
    const guard = guardRedis(redis, {
      onCommandTimeout: () => app.metrics.redisErrors.inc({ kind: 'command_timeout' }),
      onChange: (down) => {
        if (down) log.warn({ conn: 'redis' }, 'redis does not answer; refusing commands until it does');
        else log.info({ conn: 'redis' }, 'redis answers again');
      },
    });
    app.decorate<Redis | Cluster>('redis', redis);
    app.decorate<Redis | Cluster>('redisSub', sub);
    app.addHook('onClose', async () => {
      guard.stop();
      await Promise.allSettled([redis.quit(), sub.quit()]);
      redis.disconnect();
      sub.disconnect();
    });
    if (redis instanceof Cluster && sub instanceof Cluster) {
      const timeoutMs = opts.clusterReadyTimeoutMs ?? 10_000;
      try {
        await Promise.all([clusterReady(redis, timeoutMs), clusterReady(sub, timeoutMs)]);
      } catch (err) {
        redis.disconnect();
        sub.disconnect();
        throw err;
      }
    }
  },
  { name: 'redis', dependencies: ['metrics'] },
);
