/**
 * One client token (a browser's, so untrusted) is bounded on its own: CLIENT_TOKEN_MAX_STREAMS open event streams
 * and CLIENT_TOKEN_RATE_LIMIT_PER_MIN mutating requests a minute, answered as the tenant's limits are (429
 * `quota_exceeded` naming the quota, 429 `rate_limited` with Retry-After), so it cannot use up its tenant's
 * TENANT_MAX_STREAMS or RATE_LIMIT_PER_MIN and lock the tenant's backend out. What a token takes still counts in
 * its tenant's totals; what it is refused does not.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { connectSse, connectWs, UpgradeRefused, type WsClient } from '../fixtures/event-clients.js';
import { loadConfig } from '../../src/config.js';

const KEYS = 'acme:key-acme,globex:key-globex';

const overQuota = (quota: string, limit: number) => (err: unknown) => {
  assert.ok(err instanceof UpgradeRefused, String(err));
  assert.equal(err.status, 429);
  assert.equal(err.body.error.code, 'quota_exceeded');
  assert.deepEqual(err.body.error.details, { quota, limit });
  return true;
};

describe('client token quotas: streams and rate, each token on its own', () => {
  let h: Harness;
  const open: WsClient[] = [];
  before(async () => {
    h = await startHarness({ env: { API_KEYS: KEYS, TENANT_MAX_STREAMS: '5', RATE_LIMIT_PER_MIN: '20' } });
  });
  after(async () => {
    for (const c of open) c.close();
    await Promise.all(open.map((c) => c.closed));
    await h?.close();
  });

  const token = async (sessionId: string, scopes: string[]) => {
    const r = await h.api.post('/v1/client-tokens', { session_id: sessionId, scopes });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.token as string;
  };

  it('defaults: 4 streams a token; a quarter of RATE_LIMIT_PER_MIN (rounded up), 0 with it', () => {
    assert.equal(loadConfig({}).CLIENT_TOKEN_MAX_STREAMS, 4);
    assert.equal(loadConfig({}).CLIENT_TOKEN_RATE_LIMIT_PER_MIN, 300);
    assert.equal(loadConfig({ RATE_LIMIT_PER_MIN: '20' }).CLIENT_TOKEN_RATE_LIMIT_PER_MIN, 5);
    assert.equal(loadConfig({ RATE_LIMIT_PER_MIN: '3' }).CLIENT_TOKEN_RATE_LIMIT_PER_MIN, 1);
    assert.equal(loadConfig({ RATE_LIMIT_PER_MIN: '0' }).CLIENT_TOKEN_RATE_LIMIT_PER_MIN, 0);
    const set = loadConfig({ CLIENT_TOKEN_MAX_STREAMS: '0', CLIENT_TOKEN_RATE_LIMIT_PER_MIN: '7' });
    assert.equal(set.CLIENT_TOKEN_MAX_STREAMS, 0);
    assert.equal(set.CLIENT_TOKEN_RATE_LIMIT_PER_MIN, 7);
  });

  it("a token's streams: CLIENT_TOKEN_MAX_STREAMS of them; the tenant's backend keeps its own", async () => {
    const s1 = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const s2 = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const t1 = await token(s1, ['read', 'message']);
    for (let i = 0; i < 4; i++) open.push(await connectWs(h.service.url, s1, { protocolToken: t1 }));
    // Its fifth stream, WebSocket or SSE: refused with the token's quota, not the tenant's.
    await assert.rejects(
      connectWs(h.service.url, s1, { protocolToken: t1 }),
      overQuota('CLIENT_TOKEN_MAX_STREAMS', 4),
    );
    const sse = await connectSse(h.service.url, s1, { token: t1 });
    assert.equal(sse.status, 429);
    // As the tenant's: a dead replica's slots are reclaimed within seconds, which Retry-After says.
    assert.equal(sse.headers.get('retry-after'), '5');
    assert.deepEqual(
      (await fetch(`${h.service.url}/v1/chat/${s1}/stream`, { headers: { authorization: `Bearer ${t1}` } }))
        .status,
      429,
    );
    // The tenant's backend still opens a stream of its own on another session: the 5th of TENANT_MAX_STREAMS.
    open.push(await connectWs(h.service.url, s2, { token: 'key-acme' }));
    // The token's streams count in the tenant's total: now full, for another token and for the key.
    const t2 = await token(s2, ['read']);
    await assert.rejects(
      connectWs(h.service.url, s2, { protocolToken: t2 }),
      overQuota('TENANT_MAX_STREAMS', 5),
    );
    await assert.rejects(
      connectWs(h.service.url, s2, { token: 'key-acme' }),
      overQuota('TENANT_MAX_STREAMS', 5),
    );
    // Another tenant is not affected.
    const g = (await h.api.as('key-globex').post('/v1/sessions', { start: false })).body.id as string;
    open.push(await connectWs(h.service.url, g, { token: 'key-globex' }));
    // A closed stream gives the token its slot back (when the server sees the close: retried until it has).
    const first = open.shift()!;
    first.close();
    await first.closed;
    let again: WsClient | undefined;
    for (let i = 0; i < 100 && !again; i++) {
      again = await connectWs(h.service.url, s1, { protocolToken: t1 }).catch((err: unknown) => {
        if (!(err instanceof UpgradeRefused) || err.status !== 429) throw err;
        return new Promise<undefined>((resolve) => setImmediate(() => resolve(undefined)));
      });
    }
    assert.ok(again, 'the closed socket never gave its slot back');
    open.push(again);
  });

  it("a token's mutating requests: CLIENT_TOKEN_RATE_LIMIT_PER_MIN; refused ones are not the tenant's", async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const t = h.api.as(await token(id, ['cancel']));
    // 5 a minute (a quarter of 20): the token's own count.
    for (let i = 0; i < 5; i++)
      assert.notEqual((await t.post(`/v1/sessions/${id}/cancel`)).status, 429, `request ${i + 1}`);
    for (let i = 0; i < 20; i++) {
      const over = await t.post(`/v1/sessions/${id}/cancel`);
      assert.equal(over.status, 429);
      assert.equal(over.body.error.code, 'rate_limited');
      assert.equal(over.body.error.details.limit, 5);
      assert.ok(Number(over.headers.get('retry-after')) > 0);
    }
    // The tenant's key: its count holds its own requests and the token's 5 accepted ones, far from 20.
    const created = await h.api.post('/v1/sessions', { start: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
  });

  it("a token's WebSocket frames count in the same window: past it, a frame is answered rate_limited", async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const t = await token(id, ['read', 'cancel']);
    // The streams the tests before held: given back as they close.
    for (const x of open.splice(0)) x.close();
    let c: WsClient | null = null;
    for (let i = 0; !c; i++) {
      c = await connectWs(h.service.url, id, { protocolToken: t }).catch((err: unknown) => {
        if (!(err instanceof UpgradeRefused) || i > 100) throw err;
        return new Promise<null>((resolve) => setTimeout(() => resolve(null), 50));
      });
    }
    open.push(c);
    // 5 a minute (a quarter of 20): 2 over REST, then 3 frames; the next frame and request are refused.
    for (let i = 0; i < 2; i++)
      assert.notEqual((await h.api.as(t).post(`/v1/sessions/${id}/cancel`)).status, 429);
    for (let i = 0; i < 3; i++) {
      const out = await c.request({ type: 'cancel', ref: `c${i}` });
      assert.notEqual(out.error?.code, 'rate_limited', JSON.stringify(out));
    }
    const over = await c.request({ type: 'cancel', ref: 'c3' });
    assert.equal(over.type, 'error', JSON.stringify(over));
    assert.equal(over.error.code, 'rate_limited');
    assert.equal(over.error.details.limit, 5);
    assert.ok(over.error.details.retry_after_s > 0);
    assert.equal((await h.api.as(t).post(`/v1/sessions/${id}/cancel`)).status, 429, 'and REST too');
    // The connection stays: a frame refused is answered, not a close.
    assert.equal((await c.request({ type: 'cancel', ref: 'c4' })).error.code, 'rate_limited');
  });
});
