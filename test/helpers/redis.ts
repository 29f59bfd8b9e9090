import { execFile } from 'node:child_process';
import { accessSync, constants, rmSync, statfsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, beforeEach } from 'node:test';
import { Redis } from 'ioredis';
import { createRedis } from '../../src/plugins/redis.js';
import { defineLuaCommands, type RedisClient } from '../../src/store/lua-commands.js';
import { RunQueue } from '../../src/store/runs.js';
import { RedisClock } from '../../src/redis/clock.js';
import {
  findExecutable,
  freeLoopbackPort,
  launchRedisServer,
  type RedisServerProcess,
} from '../../src/redis/embedded.js';

/**
 * Private redis-server processes for tests: each on a free loopback port (never 6379, where the machine's shared
 * Redis runs) with a fresh temporary data directory. Directories are removed when the test process exits; servers
 * still running then are killed by src/redis/embedded.ts's exit handler.
 */

export interface TestRedis {
  /** `redis://127.0.0.1:<port>`; the same after `restart()`. */
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  /** Graceful shutdown (SIGTERM: the AOF is flushed). The data directory is kept, so `restart()` works after it. */
  stop(): Promise<void>;
  /** SIGKILL, like a crash. */
  kill(): Promise<void>;
  /** Starts the server again on the same port and directory (stopping it first if it is still running). */
  restart(): Promise<void>;
}

const SHARED_REDIS_PORT = 6379;
const tempDirs = new Set<string>();
let cleanupInstalled = false;

function rememberTempDir(dir: string): void {
  tempDirs.add(dir);
  if (cleanupInstalled) return;
  cleanupInstalled = true;
  process.on('exit', () => {
    for (const d of tempDirs) {
      try {
        rmSync(d, { recursive: true, force: true });
      } catch {
        // best effort
      }
    }
  });
}

/**
 * Where test servers keep their files: /dev/shm (tmpfs) when the machine has one. A SIGKILLed redis-server loses
 * nothing that reached the kernel there, which is all the durability tests kill; and an fsync costs nothing, where on
 * a busy disk one `appendfsync always` write can stall Redis past the service's health probe (1 s), and every command
 * of that service is refused with a 503 for as long (seen in CI: a whole test file's creates answered 503).
 */
const TEMP_ROOT = (() => {
  try {
    accessSync('/dev/shm', constants.W_OK);
    return statfsSync('/dev/shm').bavail * statfsSync('/dev/shm').bsize > 2 ** 30 ? '/dev/shm' : os.tmpdir();
  } catch {
    return os.tmpdir();
  }
})();

async function makeTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(TEMP_ROOT, prefix));
  rememberTempDir(dir);
  return dir;
}

function assertPrivatePort(port: number): void {
  if (port === SHARED_REDIS_PORT) {
    throw new Error('Test Redis helpers must never use port 6379 (the shared Redis)');
  }
}

async function privatePort(): Promise<number> {
  for (let i = 0; i < 5; i += 1) {
    const port = await freeLoopbackPort();
    if (port !== SHARED_REDIS_PORT) return port;
  }
  throw new Error('Could not find a free loopback port');
}

/** `count` distinct free loopback ports (all held open together while picking, so none repeats). */
async function privatePorts(count: number): Promise<number[]> {
  const servers: net.Server[] = [];
  try {
    const ports: number[] = [];
    while (ports.length < count) {
      const server = net.createServer();
      servers.push(server);
      const port = await new Promise<number>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => {
          const address = server.address();
          resolve(typeof address === 'object' && address !== null ? address.port : 0);
        });
      });
      if (port > 0 && port !== SHARED_REDIS_PORT) ports.push(port);
    }
    return ports;
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
}

/**
 * Starts a private redis-server. With `appendonly` (the default) it writes an AOF with `appendfsync always`, so data
 * written before a `kill()` survives a `restart()`; without it, it keeps nothing on disk.
 */
export async function startTestRedis(opts: { appendonly?: boolean } = {}): Promise<TestRedis> {
  const appendonly = opts.appendonly ?? true;
  const dataDir = await makeTempDir('toolrunner-test-redis-');
  const args = [
    '--dir',
    dataDir,
    '--save',
    '',
    '--appendonly',
    appendonly ? 'yes' : 'no',
    ...(appendonly ? ['--appendfsync', 'always'] : []),
  ];

  let server: RedisServerProcess | undefined;
  for (let attempt = 1; server === undefined; attempt += 1) {
    const port = await privatePort();
    assertPrivatePort(port);
    try {
      server = await launchRedisServer({ port, args, cwd: dataDir });
    } catch (err) {
      // Another process may have taken the port between picking and binding it.
      if (attempt >= 3) throw err;
    }
  }
  let current: RedisServerProcess = server;
  const { port, url } = current;

  return {
    url,
    port,
    dataDir,
    stop: () => current.stop(),
    kill: () => current.kill(),
    restart: async () => {
      await current.stop();
      current = await launchRedisServer({ port, args, cwd: dataDir });
    },
  };
}

export interface TestCluster {
  nodes: Array<{ host: string; port: number }>;
  stop(): Promise<void>;
}

function execFileText(file: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 4 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) {
        reject(
          new Error(`${path.basename(file)} ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`),
        );
      } else {
        resolve(`${stdout}${stderr}`);
      }
    });
  });
}

async function clusterInfo(port: number): Promise<string> {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
    connectTimeout: 1000,
    commandTimeout: 1000,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    return String(await client.call('CLUSTER', 'INFO'));
  } catch (err) {
    return `error: ${err instanceof Error ? err.message : String(err)}`;
  } finally {
    client.disconnect();
  }
}

/**
 * Starts `n` (at least 3) cluster-enabled redis-server processes on loopback, joins them into a cluster with
 * `redis-cli --cluster create … --cluster-replicas 0`, and waits until every node reports `cluster_state:ok`.
 */
export async function startTestCluster(n = 3): Promise<TestCluster> {
  if (n < 3) throw new Error('A Redis cluster needs at least 3 masters');
  const redisCli = findExecutable('redis-cli', ['/usr/bin/redis-cli', '/usr/local/bin/redis-cli']);
  if (redisCli === null) {
    throw new Error('redis-cli not found; install it (Debian: apt-get install redis-tools)');
  }
  // Each node needs a client port and a cluster-bus port (set explicitly: the default, port + 10000, may be taken or
  // above 65535).
  const ports = await privatePorts(2 * n);
  const servers: RedisServerProcess[] = [];
  const dirs: string[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(servers.map((s) => s.stop()));
    await Promise.all(
      dirs.map(async (d) => {
        await rm(d, { recursive: true, force: true });
        tempDirs.delete(d);
      }),
    );
  };

  try {
    for (let i = 0; i < n; i += 1) {
      const port = ports[2 * i];
      const busPort = ports[2 * i + 1];
      if (port === undefined || busPort === undefined) throw new Error('internal: not enough ports');
      assertPrivatePort(port);
      const dir = await makeTempDir(`toolrunner-test-cluster-${i}-`);
      dirs.push(dir);
      servers.push(
        await launchRedisServer({
          port,
          cwd: dir,
          args: [
            '--dir',
            dir,
            '--save',
            '',
            '--appendonly',
            'no',
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            'nodes.conf',
            '--cluster-port',
            String(busPort),
            '--cluster-node-timeout',
            '5000',
          ],
        }),
      );
    }

    const nodes = servers.map((s) => ({ host: '127.0.0.1', port: s.port }));
    await execFileText(
      redisCli,
      [
        '--cluster',
        'create',
        ...nodes.map((node) => `${node.host}:${node.port}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ],
      60_000,
    );

    const deadline = Date.now() + 30_000;
    while (true) {
      const infos = await Promise.all(nodes.map((node) => clusterInfo(node.port)));
      if (infos.every((info) => /cluster_state:ok/.test(info))) break;
      if (Date.now() > deadline) {
        throw new Error(`Cluster did not reach cluster_state:ok within 30 s:\n${infos.join('\n---\n')}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return { nodes, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * For tests of the store's parts without a service, called in a `describe`: a private redis-server that keeps
 * nothing on disk and a client of it with the session store's scripts defined (`sess*`), flushed before each test,
 * both closed after the suite. `redis` is read once the suite's `before` has run.
 */
export function storeRedisForSuite(): { readonly redis: RedisClient } {
  let server: TestRedis | undefined;
  let client: RedisClient | undefined;
  before(async () => {
    server = await startTestRedis({ appendonly: false });
    client = createRedis({ url: server.url }) as RedisClient;
    defineLuaCommands(client, new URL('../../src/store/lua/', import.meta.url), 'sess');
  });
  after(async () => {
    client?.disconnect();
    await server?.stop();
  });
  beforeEach(() => client!.flushall());
  return {
    get redis() {
      if (!client) throw new Error('storeRedisForSuite: read before the suite started');
      return client;
    },
  };
}

/**
 * `storeRedisForSuite` with the run queue on its client (no clock skew allowance, Redis's own clock), for tests of a
 * run's claim and due entries, called in a `describe`. Both are read once the suite's `before` has run.
 */
export function runQueueForSuite(): { readonly redis: RedisClient; readonly runs: RunQueue } {
  const store = storeRedisForSuite();
  let runs: RunQueue | undefined;
  before(() => {
    runs = new RunQueue(store.redis, 0, new RedisClock());
  });
  return {
    get redis() {
      return store.redis;
    },
    get runs() {
      if (!runs) throw new Error('runQueueForSuite: read before the suite started');
      return runs;
    },
  };
}
