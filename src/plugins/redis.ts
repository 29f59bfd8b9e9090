import fp from 'fastify-plugin';
import { Redis, Cluster, type RedisOptions } from 'ioredis';

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
}

/**
 * Commands fail within COMMAND_TIMEOUT_MS while Redis is unreachable, so routes answer 503 instead of hanging;
 * the client reconnects by itself (backoff capped at 2 s) once Redis is back.
 */
const COMMAND_TIMEOUT_MS = 3000;

const common: RedisOptions = {
  commandTimeout: COMMAND_TIMEOUT_MS,
  maxRetriesPerRequest: 1,
  enableAutoPipelining: true,
  retryStrategy: (times) => Math.min(50 * 2 ** times, 2000),
};

export function createRedis(opts: RedisPluginOptions): Redis | Cluster {
  if (opts.clusterNodes?.length) {
    return new Cluster(opts.clusterNodes, {
      redisOptions: common,
      enableAutoPipelining: true,
      clusterRetryStrategy: (times) => Math.min(50 * 2 ** times, 2000),
    });
  }
  return new Redis(opts.url ?? 'redis://127.0.0.1:6379', common);
}

export default fp<RedisPluginOptions>(
  async (app, opts) => {
    const redis = createRedis(opts);
    // A subscriber connection never times out commands: it waits for messages.
    const sub = opts.clusterNodes?.length
      ? new Cluster(opts.clusterNodes, {
          redisOptions: { ...common, commandTimeout: undefined as unknown as number },
        })
      : new Redis(opts.url ?? 'redis://127.0.0.1:6379', {
          ...common,
          commandTimeout: undefined as unknown as number,
        });
    for (const [name, conn] of [
      ['redis', redis],
      ['redis-sub', sub],
    ] as const) {
      conn.on('error', (err: Error) => app.log.warn({ err, conn: name }, 'redis connection error'));
    }
    app.decorate<Redis | Cluster>('redis', redis);
    app.decorate<Redis | Cluster>('redisSub', sub);
    app.addHook('onClose', async () => {
      await Promise.allSettled([redis.quit(), sub.quit()]);
    });
  },
  { name: 'redis' },
);
