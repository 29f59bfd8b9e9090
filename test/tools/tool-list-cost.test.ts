/**
 * What a tenant's tool list costs, and whom it makes wait (found by a probe): with 100 tools of 64 KB schemas
 * registered, `GET /v1/tools/<a name that is not the tenant's>` read and decoded all of them (HVALS, 7.4 MB) at every
 * request, and 16 loops of it took another tenant's `GET /v1/sessions/:id` from 4 ms to 1.1 s; `GET /v1/tools`
 * (the whole list, every time) was made at once however many of one tenant's were in progress.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { monitorRedis } from '../helpers/redis-monitor.js';
import { toolsKey } from '../../src/tenant-tools/keys.js';
import type { TenantToolDef } from '../../src/tenant-tools/types.js';

/** A tool whose schema's description is `chars` long. */
const tool = (chars: number) => ({
  description: 'A tool of the tenant.',
  input_schema: { type: 'object', description: 'd'.repeat(chars), properties: {} },
  runner: { type: 'worker' },
});

describe("the tenant's tools, listed and looked up", { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let b: Api;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a,globex:key-b' } });
    a = h.api;
    b = h.api.as('key-b');
    for (let i = 0; i < 40; i++) {
      const r = await a.req('PUT', `/v1/tools/t${String(i).padStart(2, '0')}`, tool(1000));
      assert.equal(r.status, 201, JSON.stringify(r.body));
    }
  });
  after(async () => h?.close());

  it("a lookup by name reads that name alone (never every tool): a miss, a server tool's name, the tenant's own", async () => {
    const key = toolsKey('acme');
    const monitor = await monitorRedis(h.redis.port);
    try {
      const miss = await a.get('/v1/tools/nope');
      assert.equal(miss.status, 404, JSON.stringify(miss.body));
      assert.equal(miss.body.error.code, 'tool_not_found');
      const gone = await a.req('DELETE', '/v1/tools/nope');
      assert.equal(gone.status, 404, JSON.stringify(gone.body));
      const server = await a.get('/v1/tools/get_weather');
      assert.equal(server.status, 200);
      assert.equal(server.body.source, 'server');
      const mine = await a.get('/v1/tools/t07');
      assert.equal(mine.status, 200);
      assert.equal(mine.body.name, 't07');
      await monitor.settle();
      const onKey = monitor.commands
        .filter((c) => c.includes(key))
        .map((c) => c[0]!.toLowerCase().replace('evalsha', 'eval'));
      assert.deepEqual(onKey, [
        // GET of the miss: the route's HGET, then the toolbox's look at the tenant's source by that name.
        'hget',
        'hget',
        // DELETE of the miss: the removal's script, then the look by name.
        'eval',
        'hget',
        // The server tool: the route's HGET; the server tools answer before the tenant's source is asked.
        'hget',
        // The tenant's own tool.
        'hget',
      ]);

      // The list, by contrast, is every tool: one HVALS, whole.
      monitor.commands.length = 0;
      const list = await a.get('/v1/tools');
      assert.equal(list.status, 200);
      const names = (list.body.data as any[]).filter((t) => t.source === 'tenant').map((t) => t.name);
      assert.deepEqual(
        names,
        Array.from({ length: 40 }, (_, i) => `t${String(i).padStart(2, '0')}`),
      );
      await monitor.settle();
      assert.deepEqual(
        monitor.commands.filter((c) => c.includes(key)).map((c) => c[0]!.toLowerCase()),
        ['hvals'],
      );
    } finally {
      monitor.stop();
    }
  });

  it("GET /v1/tools is a heavy read: one tenant's are made one after another in its own line; another tenant's are not behind them", async () => {
    const registry = h.service.app.tenantTools;
    const list = registry.list.bind(registry);
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let arrived = 0;
    let firstIn = () => {};
    const first = new Promise<void>((resolve) => (firstIn = resolve));
    // acme's lists wait at the registry until released: the first holds acme's place in its line.
    registry.list = async (tenant: string): Promise<TenantToolDef[]> => {
      if (tenant === 'acme') {
        if (++arrived === 1) firstIn();
        await released;
      }
      return list(tenant);
    };
    try {
      const held = [a.get('/v1/tools'), a.get('/v1/tools'), a.get('/v1/tools')];
      await first;
      // Another tenant's list is made meanwhile, and acme's reads that are not heavy are answered.
      const theirs = await b.get('/v1/tools');
      assert.equal(theirs.status, 200);
      assert.ok(!(theirs.body.data as any[]).some((t) => t.source === 'tenant'));
      assert.equal((await a.get('/v1/tools/t01')).status, 200);
      // acme's other two lists wait in its line: they have not reached the registry.
      assert.equal(arrived, 1);
      release();
      for (const r of await Promise.all(held)) {
        assert.equal(r.status, 200);
        assert.equal((r.body.data as any[]).filter((t) => t.source === 'tenant').length, 40);
      }
      assert.equal(arrived, 3);
    } finally {
      release();
      registry.list = list;
    }
  });

  it('GET /v1/tools answers every tool whole, large ones too (no paging); the registry decodes them a step per turn', async () => {
    for (let i = 0; i < 5; i++) {
      const r = await b.req('PUT', `/v1/tools/big${i}`, tool(60_000));
      assert.equal(r.status, 201, JSON.stringify(r.body));
    }
    const r = await b.get('/v1/tools');
    assert.equal(r.status, 200);
    const mine = (r.body.data as any[]).filter((t) => t.source === 'tenant');
    assert.deepEqual(
      mine.map((t) => t.name),
      ['big0', 'big1', 'big2', 'big3', 'big4'],
    );
    for (const t of mine) assert.equal(t.input_schema.description.length, 60_000);
    assert.deepEqual(Object.keys(r.body), ['data', 'mcp_servers']);

    // Decoded a step at a time: no two of the 60 KB definitions in one turn of the event loop.
    let turns = 0;
    let ticking = true;
    const tick = () => {
      if (!ticking) return;
      turns++;
      setImmediate(tick);
    };
    tick();
    const parse = JSON.parse;
    const decodedAt: number[] = [];
    JSON.parse = (text: string, reviver?: Parameters<typeof parse>[1]) => {
      if (typeof text === 'string' && text.includes('"name":"big')) decodedAt.push(turns);
      return parse(text, reviver);
    };
    try {
      assert.equal((await h.service.app.tenantTools.list('globex')).length, 5);
    } finally {
      JSON.parse = parse;
      ticking = false;
    }
    assert.equal(decodedAt.length, 5);
    assert.equal(new Set(decodedAt).size, 5, `decoded in turns ${decodedAt.join(' ')}`);
  });
});

describe('GET /v1/tools while an MCP server does not answer', { timeout: 120_000 }, () => {
  let h: Harness;
  let hang: http.Server;
  /** Resolves at the first request the server that never answers receives (the list's connection attempt). */
  let reached: Promise<void>;
  before(async () => {
    let arrived = () => {};
    reached = new Promise<void>((resolve) => (arrived = resolve));
    hang = http.createServer(() => arrived());
    await new Promise<void>((resolve) => hang.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(hang.address() as AddressInfo).port}/mcp`;
    // The list waits for the server up to this long: long enough that only a read made behind it would come after.
    h = await startHarness({
      env: { MCP_SERVERS: JSON.stringify({ slow: { url } }), MCP_CONNECT_TIMEOUT_MS: '20000' },
    });
  });
  after(async () => {
    hang.closeAllConnections();
    hang.close();
    await h?.close();
  });

  it("does not hold its tenant's line of heavy reads while it waits for the server (review of ab17c13)", async () => {
    const order: string[] = [];
    const list = h.api.get('/v1/tools').then((r) => {
      order.push('list');
      return r;
    });
    await reached;
    // A heavy read of the same tenant is answered while the list waits on the server, not after it.
    const sessions = await h.api.get('/v1/sessions');
    order.push('sessions');
    assert.equal(sessions.status, 200);
    hang.closeAllConnections(); // the server goes away: the list answers with what it knows (none of its tools)
    assert.equal((await list).status, 200);
    assert.deepEqual(order, ['sessions', 'list']);
  });
});
