/**
 * Issue 22 item 2: loose objects are bounded. Every object of a JSON body (REST or WebSocket frame) has at most 256
 * keys, refused before the parse; `params` holds at most 64 keys once merged; `params.metadata` is flat, ≤ 64 keys of
 * ≤ 64 chars, values ≤ 512 chars; a page of GET /v1/sessions stops at 1 MiB.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocket } from 'ws';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { Redis } from 'ioredis';
import { jsonBoundsExceeded, jsonScan, jsonTooWide } from '../../src/json-depth.js';
import { wsUrl } from '../fixtures/event-clients.js';
import { toolCalls, toolUse } from '../fake/script.js';

const wide = (n: number, prefix = 'k') =>
  Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i.toString(36)}`, 0]));

describe('loose objects are bounded', { timeout: 60_000 }, () => {
  let h: Harness;
  let acme: Api;

  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-acme,globex:key-globex,initech:key-initech' } });
    acme = h.api.as('key-acme');
  });
  after(async () => h?.close());

  it('finds the keys that need the prototype check in the same pass, and reads long strings whole', () => {
    const suspect = (text: string) => jsonScan(Buffer.from(text), 64, 256).suspectKeys;
    assert.equal(suspect('{"__proto__":{}}'), true);
    assert.equal(suspect('{"a":{"constructor":{"prototype":{}}}}'), true);
    assert.equal(suspect('{"\\u005f_proto__":1}'), true, 'an escape may spell one');
    assert.equal(
      suspect('{"x":"a\\\\","__proto__":1}'),
      true,
      'after a string ending in an escaped backslash',
    );
    assert.equal(suspect('{"x":"__proto__","y":["constructor"]}'), false, 'values are not keys');
    assert.equal(suspect('{"a":"\\"__proto__\\":"}'), false, 'inside a string');
    assert.equal(suspect(JSON.stringify({ content: 'r'.repeat(900_000), s: 'a\\"b'.repeat(1000) })), false);
    // Brackets and quotes inside long strings with escapes do not count.
    const text = JSON.stringify({ a: `${'x'.repeat(100)}\\"[[[{{{`.repeat(2000), b: wide(10) });
    assert.equal(jsonBoundsExceeded(Buffer.from(text), 2, 256), null);
    assert.equal(jsonBoundsExceeded(Buffer.from(text), 2, 9), 'keys');
  });

  it('refuses prototype keys in a body, whatever their spelling, and parses the rest with JSON.parse', async () => {
    for (const body of [
      '{"start":false,"params":{"__proto__":{"x":1}}}',
      '{"start":false,"params":{"\\u005f\\u005fproto__":{"x":1}}}',
      '{"start":false,"params":{"constructor":{"prototype":{"x":1}}}}',
    ]) {
      const r = await fetch(`${acme.base}/v1/sessions`, {
        method: 'POST',
        headers: { authorization: 'Bearer key-acme', 'content-type': 'application/json' },
        body,
      });
      assert.equal(r.status, 400, body);
      const { error } = (await r.json()) as { error: { code: string; details: Array<{ code: string }> } };
      assert.equal(error.code, 'invalid_request');
      assert.equal(error.details[0]!.code, 'forbidden_key');
    }
    const ok = await acme.post('/v1/sessions', {
      start: false,
      params: { system: '"__proto__": constructor' },
      metadata: { k: 'constructor' },
    });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    assert.deepEqual(ok.body.metadata, { k: 'constructor' });
  });

  it('counts keys per object in one pass, strings and arrays aside', () => {
    assert.equal(jsonTooWide(JSON.stringify(wide(256)), 256), false);
    assert.equal(jsonTooWide(JSON.stringify(wide(257)), 256), true);
    assert.equal(jsonTooWide(JSON.stringify({ a: { b: wide(257) } }), 256), true);
    assert.equal(
      jsonTooWide(JSON.stringify({ a: [wide(200), wide(200)], s: 'x:'.repeat(1000) }), 256),
      false,
    );
    assert.equal(jsonTooWide(JSON.stringify([wide(100), { n: Array(300).fill({ a: 1 }) }]), 256), false);
    assert.equal(jsonTooWide('{"a\\":b":1,"c":{"d":2}}', 2), false, 'a colon inside a key');
    // One pass that stops at the first breach: the 257th key is found before the deep tail is read (a scan of
    // depth first, then keys, read the whole text twice), and no byte after it counts.
    const wideThenDeep = JSON.stringify(wide(257)).slice(0, -1) + ',"z":' + '['.repeat(100);
    assert.equal(jsonBoundsExceeded(Buffer.from(wideThenDeep), 64, 256), 'keys');
    assert.equal(jsonBoundsExceeded(Buffer.from('{"é:[":' + '['.repeat(65)), 64, 256), 'depth');
    assert.equal(
      jsonBoundsExceeded(Buffer.from('{"é:[":"\\"[[[[","b":[1]}'), 2, 256),
      null,
      'UTF-8 and escapes',
    );
  });

  it('refuses a create with 90,000 params keys with a 400, fast', async () => {
    const body = JSON.stringify({ params: wide(90_000), start: false });
    assert.ok(body.length < 1_048_576);
    const t0 = performance.now();
    const r = await acme.req('POST', '/v1/sessions', body);
    const ms = performance.now() - t0;
    assert.equal(r.status, 400);
    assert.equal(r.body.error.code, 'invalid_request');
    assert.equal(r.body.error.details.max_keys, 256);
    assert.ok(ms < 1000, `took ${ms} ms`);
    // Wide objects anywhere: in a message's content, too.
    const deep = await acme.post('/v1/sessions', {
      messages: [{ role: 'user', content: [{ type: 'text', text: 'x', extra: wide(300) }] }],
    });
    assert.equal(deep.status, 400);
    assert.equal(deep.body.error.code, 'invalid_request');
  });

  it('bounds params keys once merged, and params.metadata', async () => {
    assert.equal((await acme.post('/v1/sessions', { params: wide(65), start: false })).status, 400);
    const s = (await acme.post('/v1/sessions', { params: wide(40), start: false })).body;
    assert.ok(s.id, JSON.stringify(s));
    const patched = await acme.req('PATCH', `/v1/sessions/${s.id}`, { params: wide(30, 'p') });
    // 40 keys + model/max_tokens defaults, then 20 more: over 64 once merged.
    assert.equal(patched.status, 400);
    assert.equal(patched.body.error.code, 'invalid_request');
    for (const metadata of [
      wide(65),
      { k: 'v'.repeat(513) },
      { ['k'.repeat(65)]: 'v' },
      { k: { nested: 1 } },
    ]) {
      const r = await acme.post('/v1/sessions', { params: { metadata }, start: false });
      assert.equal(r.status, 400, JSON.stringify(metadata).slice(0, 80));
      assert.equal(r.body.error.code, 'invalid_request');
    }
    assert.equal(
      (await acme.post('/v1/sessions', { params: { metadata: { user_id: 'u-1' } }, start: false })).status,
      201,
    );
  });

  /** An open WebSocket of tenant acme on the session's stream. */
  async function acmeSocket(id: string): Promise<WebSocket> {
    const ws = new WebSocket(wsUrl(h.service.url, id), ['chat', 'bearer', 'key-acme']);
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    return ws;
  }

  it('refuses a WebSocket frame with a wide object', async () => {
    const s = (await acme.post('/v1/sessions', { start: false })).body;
    const ws = await acmeSocket(s.id);
    const answer = new Promise<any>((resolve) =>
      ws.on('message', (m) => {
        const f = JSON.parse(String(m));
        if (f.type === 'error') resolve(f);
      }),
    );
    ws.send(JSON.stringify({ type: 'message', ref: 'r1', content: 'hi', extra: wide(300) }));
    const f = await answer;
    assert.equal(f.error.code, 'invalid_request');
    ws.close();
  });

  it('answers a frame whose ref is missing or invalid (empty, too long, not a string) with ref null', async () => {
    const s = (await acme.post('/v1/sessions', { start: false })).body;
    const ws = await acmeSocket(s.id);
    const errors: any[] = [];
    const refs: unknown[] = [undefined, '', 'r'.repeat(201), {}, 7];
    const all = new Promise<void>((resolve) =>
      ws.on('message', (m) => {
        const f = JSON.parse(String(m));
        if (f.type === 'error') errors.push(f);
        if (errors.length === refs.length) resolve();
      }),
    );
    // Sent at once: every answer is the same, so their order does not matter.
    for (const ref of refs) ws.send(JSON.stringify({ type: 'message', ref, content: 'hi' }));
    await all;
    assert.deepEqual(
      errors.map((f) => [f.ref, f.error.code]),
      refs.map(() => [null, 'invalid_request']),
    );
    ws.close();
  });

  it('stops a page of GET /v1/sessions at 1 MiB, reading only what it sends', async (t) => {
    const globex = h.api.as('key-globex');
    const system = 'x'.repeat(400_000);
    for (let i = 0; i < 8; i++)
      assert.equal((await globex.post('/v1/sessions', { params: { system }, start: false })).status, 201);
    const seen = new Set<string>();
    let cursor: string | null = null;
    const redis = new Redis(h.redis.url);
    t.after(() => redis.disconnect());
    // Each session a page reads for its view is one list-view script, its one HKEYS (INFO counts a script's commands).
    const viewReads = async () =>
      Number(/cmdstat_hkeys:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);
    for (let pages = 0; pages < 10; pages++) {
      const before = await viewReads();
      const r: { status: number; body: any } = await globex.get(
        `/v1/sessions?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      assert.equal(r.status, 200);
      // A page reads the sessions it sends and one more (the one over the bound), not the whole round of 100:
      // each read is a 400 kB hash decoded on the event loop. (Other tenants' and sweeps' reads may add a few.)
      const read = (await viewReads()) - before;
      assert.ok(read <= r.body.data.length + 2, `read ${read} sessions for a page of ${r.body.data.length}`);
      assert.ok(
        JSON.stringify(r.body).length <= 1_048_576 + 4096,
        `page of ${JSON.stringify(r.body).length} bytes`,
      );
      assert.ok(r.body.data.length >= 1);
      for (const s of r.body.data) seen.add(s.id);
      cursor = r.body.next_cursor;
      if (!r.body.has_more) break;
    }
    assert.equal(seen.size, 8);
  });

  it('a list reads each session’s view, not its step: running sessions holding 1 MB approved inputs cost a list no MB', async (t) => {
    const initech = h.api.as('key-initech');
    const tool = {
      description: 'Look up, slowly.',
      input_schema: { type: 'object', properties: { q: { type: 'string' } } },
      runner: { type: 'worker' },
    };
    assert.equal((await initech.req('PUT', '/v1/tools/slow_lookup', tool)).status, 201);
    // Sessions whose call was approved with a 1 MB edited input: each runs (parked on its task, no worker claims
    // it), its step holding the input; one more waits for its decision (its view shows the step).
    const MB = 1_000_000;
    const running: string[] = [];
    const N = 10;
    for (let i = 0; i <= N; i++) {
      h.fake.enqueue(toolCalls([toolUse('slow_lookup', { q: `small ${i}` })]));
      const s = await initech.post('/v1/sessions', {
        input: `look ${i}`,
        tools: ['slow_lookup'],
        approval: ['slow_lookup'],
      });
      assert.equal(s.status, 201, JSON.stringify(s.body));
      const waiting = await initech.waitStatus(s.body.id, 'requires_action');
      if (i === N) break;
      const call = waiting.required_action.tool_calls[0].id;
      const d = await initech.post(`/v1/sessions/${s.body.id}/tool-calls/${call}`, {
        decision: 'approve',
        input: { q: 'x'.repeat(MB) },
      });
      assert.equal(d.status, 202, JSON.stringify(d.body));
      running.push(s.body.id);
    }
    t.after(async () => {
      for (const id of running) await initech.post(`/v1/sessions/${id}/cancel`, {});
    });
    const redis = new Redis(h.redis.url);
    t.after(() => redis.disconnect());
    const sent = async () => Number(/total_net_output_bytes:(\d+)/.exec(await redis.info('stats'))?.[1] ?? 0);
    for (const query of ['status=running&limit=100', 'limit=100', 'status=idle&limit=100']) {
      const before = await sent();
      const r = await initech.get(`/v1/sessions?${query}`);
      // What Redis sent meanwhile (to every client: the service's sweeps add a few kB): no session's step. Each
      // read whole was 1 MB, 10 MB a page.
      const bytes = (await sent()) - before;
      assert.equal(r.status, 200);
      assert.ok(bytes < 200_000, `${query}: Redis sent ${bytes} bytes for a page of ${r.body.data.length}`);
      if (query.startsWith('status=running')) {
        assert.deepEqual(new Set(r.body.data.map((s: { id: string }) => s.id)), new Set(running));
        assert.ok(r.body.data.every((s: { required_action: unknown }) => s.required_action === null));
      }
      if (query === 'limit=100') {
        assert.equal(r.body.data.length, N + 1);
        // Each item is the session as its GET shows it: the view's fields are all read (the step too, for the one
        // that waits for its decision).
        for (const item of r.body.data) {
          const one = await initech.get(`/v1/sessions/${item.id}`);
          assert.deepEqual(item, one.body);
        }
        assert.equal(r.body.data[0].required_action.type, 'approve_tool_calls');
      }
    }
  });
});
