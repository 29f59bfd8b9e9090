import { after, before, describe, it, mock } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type ApiResponse, type Harness } from '../helpers/service.js';
import { hang, text, toolCall } from '../fake/script.js';
import { createSession } from '../../src/sessions/create.js';
import { createSessionBody } from '../../src/schemas.js';
import { SessionExists } from '../../src/errors.js';

const lookup = { name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } };
const TOTAL = 25;

describe('GET /v1/sessions', () => {
  let h: Harness;
  /** Ids in creation order. */
  const created: string[] = [];
  const statusOf = new Map<string, string>();

  before(async () => {
    h = await startHarness();
    h.fake.setHandler((req) => {
      const first: any = req.messages[0]?.content;
      const t = String(typeof first === 'string' ? first : first?.[0]?.text);
      if (t.startsWith('hang')) return hang();
      if (t.startsWith('client')) return toolCall('lookup', { q: t });
      return text('ok');
    });
    // #0 stays running (its turn hangs), every 6th from #1 waits for a client result, the rest are idle (some after
    // a run, some never started).
    for (let i = 0; i < TOTAL; i++) {
      const kind = i === 0 ? 'hang' : i % 6 === 1 ? 'client' : i % 2 === 0 ? 'run' : 'still';
      const r = await h.api.post('/v1/sessions', {
        input: `${kind} ${i}`,
        tools: [lookup],
        start: kind !== 'still',
        metadata: { i },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      created.push(r.body.id);
      // The next session gets a later created_at (same-millisecond sessions would be ordered by id instead).
      const at = Date.parse(r.body.created_at);
      while (Date.now() <= at) await new Promise((res) => setImmediate(res));
      statusOf.set(r.body.id, kind === 'hang' ? 'running' : kind === 'client' ? 'requires_action' : 'idle');
    }
    for (const id of created) {
      const s = await h.api.waitStatus(id, statusOf.get(id)!);
      assert.equal(s.status, statusOf.get(id));
    }
    await h.fake.waitForRequests(1 + 4 + 10);
  });
  after(async () => {
    if (created[0]) await h.api.post(`/v1/sessions/${created[0]}/cancel`, {});
    await h?.close();
  });

  /** All pages of a listing with `limit`, checking each page's shape. */
  async function pages(query: string, limit: number): Promise<{ ids: string[]; sizes: number[] }> {
    const ids: string[] = [];
    const sizes: number[] = [];
    let cursor: string | null = null;
    for (let guard = 0; guard < 100; guard++) {
      const qs: string = `limit=${limit}${query ? `&${query}` : ''}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const r: ApiResponse = await h.api.get(`/v1/sessions?${qs}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.ok(r.body.data.length <= limit);
      assert.equal(r.body.has_more, r.body.next_cursor !== null);
      ids.push(...r.body.data.map((s: any) => s.id));
      sizes.push(r.body.data.length);
      for (const s of r.body.data) assert.equal(s.object, 'session');
      if (!r.body.has_more) return { ids, sizes };
      cursor = r.body.next_cursor;
    }
    throw new Error('listing did not end');
  }

  it('lists newest first, every session once', async () => {
    const all = await h.api.get('/v1/sessions?limit=100');
    assert.equal(all.status, 200);
    const ids = all.body.data.map((s: any) => s.id);
    assert.deepEqual(ids, [...created].reverse(), 'newest first');
    assert.equal(all.body.has_more, false);
    assert.equal(all.body.next_cursor, null);
    const times = all.body.data.map((s: any) => Date.parse(s.created_at));
    for (let i = 1; i < times.length; i++) assert.ok(times[i - 1] >= times[i], 'created_at non-increasing');
    for (const s of all.body.data) assert.equal(s.status, statusOf.get(s.id), `status of ${s.metadata.i}`);
    const dflt = await h.api.get('/v1/sessions');
    assert.deepEqual(
      dflt.body.data.map((s: any) => s.id),
      ids.slice(0, 20),
      'default limit 20',
    );
    assert.equal(dflt.body.has_more, true);
  });

  it('pages with limit/cursor exactly: no duplicate, no gap', async () => {
    const expected = [...created].reverse();
    for (const limit of [7, 1, 5, 24, 25, 26]) {
      const { ids, sizes } = await pages('', limit);
      assert.deepEqual(ids, expected, `limit ${limit}`);
      assert.equal(new Set(ids).size, ids.length, `limit ${limit}: no duplicates`);
      // a page is short only at the end; an exact multiple ends with a full page and has_more false, or one more
      // empty page
      assert.ok(
        sizes.slice(0, -1).every((n) => n === limit),
        `limit ${limit}: sizes ${sizes.join(',')}`,
      );
    }
    const seven = await pages('', 7);
    assert.deepEqual(seven.sizes, [7, 7, 7, 4]);
  });

  it('filters by status, newest first, paged exactly', async () => {
    for (const status of ['idle', 'requires_action', 'running', 'failed']) {
      const expected = [...created].reverse().filter((id) => statusOf.get(id) === status);
      for (const limit of [100, 2, 7]) {
        const { ids } = await pages(`status=${status}`, limit);
        assert.deepEqual(ids, expected, `status ${status}, limit ${limit}`);
      }
    }
    const counts = { idle: 0, requires_action: 0, running: 0 } as Record<string, number>;
    for (const s of statusOf.values()) counts[s]!++;
    assert.deepEqual(counts, { idle: 20, requires_action: 4, running: 1 });
  });

  it('a deleted session leaves the listing and the pages stay exact', async () => {
    const victim = created[10]!;
    const del = await h.api.req('DELETE', `/v1/sessions/${victim}`);
    assert.equal(del.status, 200, JSON.stringify(del.body));
    const expected = [...created].reverse().filter((id) => id !== victim);
    const { ids } = await pages('', 7);
    assert.deepEqual(ids, expected);
    const idle = await pages('status=idle', 3);
    assert.deepEqual(
      idle.ids,
      expected.filter((id) => statusOf.get(id) === 'idle'),
    );
    // a cursor pointing at the deleted session still continues right after it
    const first = await h.api.get('/v1/sessions?limit=14');
    assert.equal(first.body.data.at(-1).id, created[11]);
    const rest = await h.api.get(
      `/v1/sessions?limit=100&cursor=${encodeURIComponent(first.body.next_cursor)}`,
    );
    assert.deepEqual(
      rest.body.data.map((s: any) => s.id),
      expected.slice(14),
    );
  });

  it('an index entry that is not its session yet (a create in flight, a lost create of the same id) is never listed', async () => {
    const { Redis } = await import('ioredis');
    const r = new Redis(h.redis.url);
    try {
      const [key] = await r.keys('t:{*}:sessions');
      const members = await r.zrange(key!, 0, -1);
      const real = members.find((m) => m.endsWith(created[3]!))!;
      // A create that lost the race for this id indexed it under its own time; a create in flight, an id not
      // written yet; an entry of a session gone long ago.
      const lost = `${String(Date.now()).padStart(15, '0')}:${created[3]}`;
      const inFlight = `${String(Date.now()).padStart(15, '0')}:ses_notwrittenyet`;
      const gone = `${String(Date.now() - 3_600_000).padStart(15, '0')}:ses_deletedlongago`;
      await r.zadd(key!, 0, lost, 0, inFlight, 0, gone);
      const { ids } = await pages('', 100);
      assert.equal(ids.filter((id) => id === created[3]).length, 1, 'the session once');
      assert.ok(!ids.includes('ses_notwrittenyet') && !ids.includes('ses_deletedlongago'));
      const left = await r.zrange(key!, 0, -1);
      assert.ok(left.includes(real) && left.includes(inFlight), 'the fresh entries stay for their create');
      assert.ok(!left.includes(gone), 'the old dangling entry is dropped');
      await r.zrem(key!, lost, inFlight);
    } finally {
      r.disconnect();
    }
  });
  it('two creates of one id in the same millisecond (two replicas creating one sub-agent): the session stays listed', async () => {
    const app = h.service.app;
    const tenant = (await app.store.load(created[0]!))!.tenant;
    const id = 'ses_samemillisecondcreate';
    const body = createSessionBody.parse({ start: false, metadata: { same: 'ms' } });
    // Both creates take their `created_at` from one frozen clock: the same index member, as when two replicas'
    // sweeps create a sub-agent in the same millisecond. The loser of the write must not remove the winner's entry.
    mock.timers.enable({ apis: ['Date'], now: Date.now() });
    let outcomes: Array<PromiseSettledResult<unknown>>;
    try {
      outcomes = await Promise.allSettled([0, 1].map(() => createSession(app.sessionDeps, tenant, body, id)));
    } finally {
      mock.timers.reset();
    }
    assert.deepEqual(outcomes.map((o) => o.status).sort(), ['fulfilled', 'rejected']);
    const lost = outcomes.find((o) => o.status === 'rejected');
    assert.ok(lost?.status === 'rejected' && lost.reason instanceof SessionExists, String(lost));
    const { ids } = await pages('', 100);
    assert.equal(ids.filter((x) => x === id).length, 1, 'the session that exists is listed once');
  });
});

describe('GET /v1/sessions?status= over many sessions', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());

  it('a status filter whose matches are older than 2000 other sessions still reaches them (has_more, cursor)', async () => {
    h.fake.enqueue(toolCall('lookup', { q: 'old' }));
    const old = await h.api.post('/v1/sessions', { input: 'the old one', tools: [lookup] });
    assert.equal(old.status, 201, JSON.stringify(old.body));
    await h.api.waitStatus(old.body.id, 'requires_action');
    const OTHERS = 2050;
    for (let i = 0; i < OTHERS; i += 50) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(50, OTHERS - i) }, (_, k) =>
          h.api.post('/v1/sessions', { input: `newer ${i + k}`, start: false }),
        ),
      );
      for (const r of batch) assert.equal(r.status, 201);
    }
    // Follow the cursor as a client would; a page may come back short or empty while has_more is true.
    const found: string[] = [];
    let cursor: string | null = null;
    for (let calls = 0; calls < 50; calls++) {
      const r: ApiResponse = await h.api.get(
        `/v1/sessions?status=requires_action&limit=5${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      assert.equal(r.status, 200, JSON.stringify(r.body));
      found.push(...r.body.data.map((s: any) => s.id));
      if (!r.body.has_more) break;
      cursor = r.body.next_cursor;
    }
    assert.deepEqual(found, [old.body.id], 'the one requires_action session is listed');
  });
});
