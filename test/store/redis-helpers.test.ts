import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import {
  findRedisServerBinary,
  freeLoopbackPort,
  launchRedisServer,
  RedisStartError,
  redisAnswers,
  startEmbeddedRedis,
} from '../../src/redis/embedded.js';
import { startTestCluster, startTestRedis } from '../helpers/redis.js';

const SHARED_REDIS_PORT = 6379;

async function withClient<T>(url: string, fn: (client: Redis) => Promise<T>): Promise<T> {
  const client = new Redis(url, { maxRetriesPerRequest: 1, retryStrategy: () => null, lazyConnect: true });
  client.on('error', () => {});
  try {
    await client.connect();
    return await fn(client);
  } finally {
    client.disconnect();
  }
}

describe('src/redis/embedded', () => {
  const dirs: string[] = [];
  after(async () => {
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  });

  test('finds the redis-server binary', () => {
    const binary = findRedisServerBinary();
    assert.ok(binary, 'redis-server must be installed for these tests');
    assert.match(binary, /redis-server$/);
  });

  test('redisAnswers is false quickly when nothing listens', async () => {
    const port = await freeLoopbackPort();
    assert.notEqual(port, SHARED_REDIS_PORT);
    const started = Date.now();
    assert.equal(await redisAnswers(`redis://127.0.0.1:${port}`, 1000), false);
    assert.ok(Date.now() - started < 2000);
  });

  test('starts, persists a key across stop/start with the same dir (AOF)', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-embedded-'));
    dirs.push(base);
    const dataDir = path.join(base, 'nested', 'data'); // created recursively
    const logs: string[] = [];
    const logger = {
      info: (_o: Record<string, unknown>, msg: string) => logs.push(`info ${msg}`),
      warn: (_o: Record<string, unknown>, msg: string) => logs.push(`warn ${msg}`),
      error: (_o: Record<string, unknown>, msg: string) => logs.push(`error ${msg}`),
    };

    const first = await startEmbeddedRedis({ dataDir, logger });
    assert.notEqual(first.port, SHARED_REDIS_PORT);
    assert.equal(first.url, `redis://127.0.0.1:${first.port}`);
    assert.equal(await redisAnswers(first.url, 1000), true);
    await withClient(first.url, async (c) => {
      assert.equal(await c.config('GET', 'appendonly').then((r) => (r as string[])[1]), 'yes');
      assert.equal(await c.config('GET', 'save').then((r) => (r as string[])[1]), '');
      await c.set('embedded:key', 'persisted value');
    });
    await first.stop();
    assert.equal(await redisAnswers(first.url, 500), false);
    await first.stop(); // idempotent
    assert.ok((await readdir(dataDir)).length > 0, 'the AOF lives in dataDir');

    const second = await startEmbeddedRedis({ dataDir, port: first.port });
    try {
      assert.equal(second.port, first.port);
      assert.equal(await withClient(second.url, (c) => c.get('embedded:key')), 'persisted value');
    } finally {
      await second.stop();
    }
    assert.ok(logs.some((l) => l.startsWith('info embedded redis-server started')));
  });

  test('a server that cannot start gives an error with its last output lines', async () => {
    const port = await freeLoopbackPort();
    await assert.rejects(
      launchRedisServer({ port, args: ['--no-such-directive', 'x'], readyTimeoutMs: 5000 }),
      (err: unknown) => {
        assert.ok(err instanceof RedisStartError);
        assert.match(err.message, /exited before answering PING/);
        assert.match(err.message, /no-such-directive|Bad directive/i);
        return true;
      },
    );
  });

  test('a taken port is reported clearly', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-embedded-'));
    dirs.push(base);
    const running = await startEmbeddedRedis({ dataDir: path.join(base, 'a') });
    try {
      await assert.rejects(
        startEmbeddedRedis({ dataDir: path.join(base, 'b'), port: running.port }),
        /exited before answering PING[\s\S]*(address already in use|could not create server)/i,
      );
    } finally {
      await running.stop();
    }
  });
});

describe('test/helpers/redis', () => {
  test('startTestRedis: kill + restart keeps AOF data on the same port and dir', async () => {
    const r = await startTestRedis();
    try {
      assert.notEqual(r.port, SHARED_REDIS_PORT);
      await withClient(r.url, (c) => c.set('k', 'v'));
      await r.kill();
      assert.equal(await redisAnswers(r.url, 500), false);
      await r.restart();
      assert.equal(await withClient(r.url, (c) => c.get('k')), 'v');
      await r.restart(); // also works while running
      assert.equal(await withClient(r.url, (c) => c.get('k')), 'v');
    } finally {
      await r.stop();
    }
  });

  test('startTestRedis without appendonly keeps nothing', async () => {
    const r = await startTestRedis({ appendonly: false });
    try {
      await withClient(r.url, (c) => c.set('k', 'v'));
      await r.restart();
      assert.equal(await withClient(r.url, (c) => c.get('k')), null);
    } finally {
      await r.stop();
    }
  });

  test('two test servers get different ports and dirs', async () => {
    const [a, b] = await Promise.all([startTestRedis(), startTestRedis()]);
    try {
      assert.notEqual(a.port, b.port);
      assert.notEqual(a.dataDir, b.dataDir);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  test('startTestCluster gives a working ioredis Cluster', async () => {
    const cluster = await startTestCluster();
    let client: Cluster | undefined;
    try {
      assert.equal(cluster.nodes.length, 3);
      for (const node of cluster.nodes) {
        assert.equal(node.host, '127.0.0.1');
        assert.notEqual(node.port, SHARED_REDIS_PORT);
      }
      client = new Cluster(cluster.nodes, { redisOptions: { maxRetriesPerRequest: 2 } });
      client.on('error', () => {});
      await client.set('{a}x', 'one');
      await client.set('{b}y', 'two');
      assert.equal(await client.get('{a}x'), 'one');
      assert.equal(await client.get('{b}y'), 'two');

      // The two keys hash to slots owned by different nodes.
      const firstNode = cluster.nodes[0];
      assert.ok(firstNode);
      const [slotA, slotB] = await withClient(`redis://127.0.0.1:${firstNode.port}`, async (c) => [
        Number(await c.call('CLUSTER', 'KEYSLOT', '{a}x')),
        Number(await c.call('CLUSTER', 'KEYSLOT', '{b}y')),
      ]);
      const owner = async (slot: number | undefined): Promise<number> => {
        for (const node of cluster.nodes) {
          const count = await withClient(`redis://127.0.0.1:${node.port}`, (c) =>
            c.call('CLUSTER', 'COUNTKEYSINSLOT', String(slot)),
          );
          if (Number(count) === 1) return node.port;
        }
        return -1;
      };
      const ownerA = await owner(slotA);
      const ownerB = await owner(slotB);
      assert.notEqual(ownerA, -1);
      assert.notEqual(ownerB, -1);
      assert.notEqual(ownerA, ownerB);
    } finally {
      if (client) await client.quit().catch(() => client?.disconnect());
      await cluster.stop();
    }
  });
});
