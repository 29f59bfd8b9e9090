import type { FastifyInstance } from 'fastify';

/**
 * A replica whose clock is off, in this process: runs `fn` with Date.now() moved by `skew` ms (either sign), restored
 * after, so the service or store code `fn` drives takes its times from that clock while Redis's (TIME) is left as it
 * is. For a service in a process of its own, see clock-skew.ts.
 */
export async function skewed<T>(skew: number, fn: () => Promise<T>): Promise<T> {
  const real = Date.now;
  Date.now = () => real() + skew;
  try {
    return await fn();
  } finally {
    Date.now = real;
  }
}

/**
 * Runs `fn` with the whole in-process service as a replica whose clock is off by `skew` ms: Date.now() moved, and the
 * service's reckoning of Redis's clock read again with it (as its next sweep would) and once more after, whatever
 * `fn`'s sweeps observed meanwhile.
 */
export async function asReplica<T>(app: FastifyInstance, skew: number, fn: () => Promise<T>): Promise<T> {
  try {
    return await skewed(skew, async () => {
      await app.store.clock.sync(app.redis);
      return fn();
    });
  } finally {
    await app.store.clock.sync(app.redis);
  }
}
