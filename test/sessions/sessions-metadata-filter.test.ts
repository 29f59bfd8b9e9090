/**
 * `GET /v1/sessions?metadata.<key>=<value>` (issue 26 item 5): filters answered from a per-tenant index of metadata
 * pairs kept by create, fork, PATCH and delete; bounded (3 filters, key 64, value 512); tenant-scoped; a filtered
 * list pages the pair's index, never the tenant's whole session index.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { monitorRedis } from '../helpers/redis-monitor.js';

const KEYS = 'acme:key-acme,globex:key-globex';

describe('metadata filters of the session list', () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: KEYS } });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r.disconnect();
    await h.close();
  });

  const ids = async (query: string, key = 'key-acme') => {
    const r = await h.api.as(key).get(`/v1/sessions?${query}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return (r.body.data as Array<{ id: string }>).map((s) => s.id);
  };
  const create = async (metadata: Record<string, unknown>) =>
    (await h.api.post('/v1/sessions', { start: false, metadata })).body.id as string;

  it('finds sessions by metadata pairs, newest first, all filters together', async () => {
    const a = await create({ chat_id: 'c1', user: 'u1' });
    const b = await create({ chat_id: 'c2', user: 'u1' });
    const c = await create({ chat_id: 'c1', user: 'u2', n: 5, ok: true, gone: null });
    await h.api.as('key-globex').post('/v1/sessions', { start: false, metadata: { chat_id: 'c1' } });
    assert.deepEqual(await ids('metadata.chat_id=c1'), [c, a]);
    assert.deepEqual(await ids('metadata.chat_id=c1&metadata.user=u1'), [a]);
    assert.deepEqual(await ids('metadata.user=u1'), [b, a]);
    assert.deepEqual(await ids('metadata.n=5&metadata.ok=true'), [c]);
    assert.deepEqual(await ids('metadata.gone=null'), [], 'null is not matched');
    assert.deepEqual(await ids('metadata.chat_id=nope'), []);
    assert.deepEqual(await ids(`metadata.chat_id=${encodeURIComponent('c1 ')}`), []);
    // Another tenant's sessions never match.
    assert.equal((await ids('metadata.chat_id=c1', 'key-globex')).length, 1);
    // Pages: limit and cursor as without filters.
    const first = await h.api.get('/v1/sessions?metadata.chat_id=c1&limit=1');
    assert.deepEqual(
      first.body.data.map((s: { id: string }) => s.id),
      [c],
    );
    assert.equal(first.body.has_more, true);
    const second = await h.api.get(
      `/v1/sessions?metadata.chat_id=c1&limit=1&cursor=${first.body.next_cursor}`,
    );
    assert.deepEqual(
      second.body.data.map((s: { id: string }) => s.id),
      [a],
    );
    // With status too.
    assert.deepEqual(await ids('metadata.chat_id=c1&status=idle'), [c, a]);
    assert.deepEqual(await ids('metadata.chat_id=c1&status=running'), []);
  });

  it('follows PATCH, fork and delete', async () => {
    const s = await create({ chat_id: 'p1', topic: 'x' });
    const patched = await h.api.req('PATCH', `/v1/sessions/${s}`, { metadata: { chat_id: 'p2' } });
    assert.equal(patched.status, 200);
    assert.deepEqual(await ids('metadata.chat_id=p1'), []);
    assert.deepEqual(await ids('metadata.topic=x'), []);
    assert.deepEqual(await ids('metadata.chat_id=p2'), [s]);
    const fork = await h.api.post(`/v1/sessions/${s}/fork`, { at_iteration: 0 });
    assert.equal(fork.status, 201);
    assert.deepEqual(await ids(`metadata.forked_from=${s}`), [fork.body.id]);
    assert.deepEqual(await ids('metadata.chat_id=p2'), [fork.body.id, s]);
    assert.equal((await h.api.req('DELETE', `/v1/sessions/${s}`)).status, 200);
    assert.deepEqual(await ids('metadata.chat_id=p2'), [fork.body.id]);
    // The index entry went with it (no stale member left to skip).
    const keys = await r.keys('t:{acme}:md:*');
    let members = 0;
    for (const k of keys) members += (await r.zrange(k, 0, -1)).filter((m) => m.endsWith(s)).length;
    assert.equal(members, 0);
  });

  it('pages the pair index, not the tenant index', async () => {
    for (let i = 0; i < 30; i++) await create({ bulk: 'yes' });
    const target = await create({ chat_id: 'needle' });
    for (let i = 0; i < 30; i++) await create({ bulk: 'yes' });
    const monitor = await monitorRedis(h.redis.port);
    try {
      assert.deepEqual(await ids('metadata.chat_id=needle'), [target]);
      await monitor.settle();
      const reads = monitor.commands.filter((c) => /^(zrevrangebylex|zrange|zscan|scan|keys)$/i.test(c[0]!));
      assert.ok(reads.length > 0, 'the list read some index');
      assert.ok(
        reads.every((c) => c[1] !== 't:{acme}:sessions'),
        `read the tenant index: ${JSON.stringify(reads)}`,
      );
      // One session read for its view (the list-view script: its HKEYS), none whole.
      const loads = monitor.scripted.filter((c) => /^hkeys$/i.test(c[0]!) && /^s:\{ses_/.test(c[1] ?? ''));
      assert.equal(loads.length, 1, 'one session loaded');
      assert.equal(monitor.commands.filter((c) => /^hgetall$/i.test(c[0]!)).length, 0, 'no whole hash read');
    } finally {
      monitor.stop();
    }
  });

  it('is bounded: 3 filters, key and value lengths, known parameters only', async () => {
    const bad = [
      'metadata.a=1&metadata.b=2&metadata.c=3&metadata.d=4',
      `metadata.${'k'.repeat(65)}=1`,
      `metadata.k=${'v'.repeat(513)}`,
      'metadata.=1',
      'meta.k=1',
      'color=blue',
      'metadata.k=1&metadata.k=2',
    ];
    for (const q of bad) {
      const r = await h.api.get(`/v1/sessions?${q}`);
      assert.equal(r.status, 400, q);
      assert.equal(r.body.error.code, 'invalid_request', q);
    }
    assert.equal((await h.api.get(`/v1/sessions?metadata.${'k'.repeat(64)}=${'v'.repeat(512)}`)).status, 200);
  });
});
