import net from 'node:net';
import { after, before } from 'node:test';
import { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { serviceEnv, spawnService, type ServiceProcess } from './process.js';
import { startTestRedis, type TestRedis } from './redis.js';

/**
 * A TCP proxy in front of a Redis, for landing a failure at an exact point of a request: once armed with a marker
 * (bytes of a command, e.g. a script argument only one write carries), the first client chunk that holds it is
 * withheld (`holdAt`) or is the last one forwarded (`holdAfter`), and from then on what any client sends is kept
 * back until `release()` (answers still flow back). Redis runs a command only once it has received all of it, so a
 * withheld command never runs, while every command before it did: a test kills the service holding the connection
 * (its last write never happened), or pauses Redis and releases the rest into the pause.
 */
export interface RedisProxy {
  /** `redis://127.0.0.1:<port>` of the proxy. */
  readonly url: string;
  /** Withhold from the first chunk that contains `marker` on. Resolves once one was withheld. */
  holdAt(marker: string): Promise<void>;
  /** Forward the first chunk that contains `marker`, withhold what follows. Resolves once it was forwarded. */
  holdAfter(marker: string): Promise<void>;
  /** Forward what was withheld, in order, and everything from now on. */
  release(): void;
  close(): Promise<void>;
}

export async function startRedisProxy(redisPort: number): Promise<RedisProxy> {
  const sockets = new Set<net.Socket>();
  let marker: Buffer | null = null;
  let forwardMarked = false;
  let holding = false;
  let onHeld: (() => void) | null = null;
  /** What each connection sent while holding, to forward on `release`. */
  const withheld = new Map<net.Socket, Buffer[]>();

  const server = net.createServer((client) => {
    const upstream = net.connect(redisPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    // The end of the previous chunk: a marker split across two chunks is found in the second one (its first part
    // was forwarded, but Redis waits for the rest of the command, which never comes).
    let tail: Buffer = Buffer.alloc(0);
    withheld.set(upstream, []);
    client.on('data', (chunk: Buffer) => {
      if (holding) {
        withheld.get(upstream)?.push(chunk);
        return;
      }
      if (marker && Buffer.concat([tail, chunk]).includes(marker)) {
        holding = true;
        marker = null;
        if (forwardMarked) upstream.write(chunk);
        else withheld.get(upstream)?.push(chunk);
        onHeld?.();
        return;
      }
      tail = marker ? chunk.subarray(Math.max(0, chunk.length - marker.length + 1)) : tail;
      upstream.write(chunk);
    });
    upstream.pipe(client);
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
      withheld.delete(upstream);
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('the proxy has no port');

  return {
    url: `redis://127.0.0.1:${address.port}`,
    holdAt(m: string) {
      marker = Buffer.from(m);
      forwardMarked = false;
      return new Promise<void>((resolve) => {
        onHeld = resolve;
      });
    },
    holdAfter(m: string) {
      marker = Buffer.from(m);
      forwardMarked = true;
      return new Promise<void>((resolve) => {
        onHeld = resolve;
      });
    },
    release() {
      holding = false;
      for (const [upstream, chunks] of withheld) {
        for (const c of chunks) upstream.write(c);
        chunks.length = 0;
      }
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The rig of serviceKillSuite, called in its `describe` after its `after` (which stops the replicas and the proxy
 * first: `after` hooks run in order): a private redis-server that keeps nothing on disk, a fake upstream that checks
 * the conversation alternates, and a direct client of the server for assertions, all closed after the suite. Read
 * once the suite's `before` has run.
 */
function killRigForSuite(): {
  readonly redis: TestRedis;
  readonly fake: FakeAnthropic;
  readonly r: Redis;
} {
  let redis: TestRedis | undefined;
  let fake: FakeAnthropic | undefined;
  let r: Redis | undefined;
  before(async () => {
    [redis, fake] = await Promise.all([
      startTestRedis({ appendonly: false }),
      startFakeAnthropic({ strictAlternation: true }),
    ]);
    r = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    r.on('error', () => {});
  });
  after(async () => {
    r?.disconnect();
    await fake?.close();
    await redis?.stop();
  });
  const ready = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error('serviceKillSuite: its rig read before the suite started');
    return v;
  };
  return {
    get redis() {
      return ready(redis);
    },
    get fake() {
      return ready(fake);
    },
    get r() {
      return ready(r);
    },
  };
}

/** A replica behind a proxy of its own, to be killed at the point the proxy holds. */
interface DoomedReplica {
  readonly service: ServiceProcess;
  readonly proxy: RedisProxy;
  /** Waits for `held` (a `holdAt`/`holdAfter` of `proxy`), SIGKILLs the replica there and closes the proxy. */
  killWhen(held: Promise<void>): Promise<void>;
}

/**
 * killRigForSuite with the suite's service processes (env `env`, on the rig's fake upstream), called in a `describe`:
 * `spawn` starts one on the rig's Redis (or `url`), `doomed` one behind a fresh proxy; all are killed and the proxy
 * closed after the suite, before the rig is (this `after` is registered first: `after` hooks run in order).
 */
export function serviceKillSuite(env: Record<string, string> = {}) {
  const procs: ServiceProcess[] = [];
  let open: RedisProxy | null = null;
  after(async () => {
    await Promise.all(procs.map((p) => p.kill()));
    await open?.close();
  });
  const rig = killRigForSuite();
  const spawn = async (name: string, url = rig.redis.url): Promise<ServiceProcess> => {
    const p = await spawnService(serviceEnv(url, rig.fake.url, env), { name });
    procs.push(p);
    return p;
  };
  const doomed = async (name = 'doomed'): Promise<DoomedReplica> => {
    const proxy = await startRedisProxy(rig.redis.port);
    open = proxy;
    const service = await spawn(name, proxy.url);
    return {
      service,
      proxy,
      async killWhen(held) {
        await held;
        await service.kill();
        await proxy.close();
        open = null;
      },
    };
  };
  return { rig, spawn, doomed };
}
