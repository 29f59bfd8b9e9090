/**
 * Schedules (spec §7.6) in one process: the routes' checks, tenant isolation, overlap skip vs allow, one late fire
 * after an outage, pause/resume, quotas, webhooks. Fires come every second through SCHEDULES_TEST_SECONDS (6-field
 * crons, tests only); an outage is made by moving a schedule's `next_run_at` into the past while no service runs
 * (and the replicas' last beat in `schedules:alive` to before it), a backlog by moving it while the service runs.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { hang, text, toolCall } from '../fake/script.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { until } from '../durability/chaos-lib.js';
import { scheduleKeys } from '../../src/schedules/keys.js';
import { cronProblem, newestMissed, nextFire } from '../../src/schedules/cron.js';
import { roundRobin } from '../../src/schedules/scheduler.js';
import { FireRaced, ScheduleStore } from '../../src/schedules/store.js';
import { SessionStore } from '../../src/store/store.js';

const KEYS = 'a:key-a,b:key-b';
const ENV = {
  API_KEYS: KEYS,
  SCHEDULES_TEST_SECONDS: 'true',
  SCHEDULE_SWEEP_MS: '100',
  WEBHOOK_ALLOW_PRIVATE: 'true',
  WEBHOOK_POLL_MS: '100',
};
const lookup = {
  name: 'lookup',
  description: 'a client tool: the session waits for its result',
  input_schema: { type: 'object', properties: {} },
};

describe('schedule times (croner)', () => {
  it('follows DST in the time zone and collapses missed fires into the newest', () => {
    const t = { cron: '30 2 * * *', at: null, timezone: 'Europe/Paris' };
    const times = (from: string, n: number) => {
      const out: string[] = [];
      let x = Date.parse(from);
      for (let i = 0; i < n; i++) out.push(new Date((x = nextFire(t, x)!)).toISOString());
      return out;
    };
    // 02:30 does not exist on 29 March (02:00 → 03:00): it fires at 03:00 CEST; on 25 October it exists twice: once.
    assert.deepEqual(times('2026-03-28T12:00:00Z', 2), [
      '2026-03-29T01:00:00.000Z',
      '2026-03-30T00:30:00.000Z',
    ]);
    assert.deepEqual(times('2026-10-24T12:00:00Z', 2), [
      '2026-10-25T00:30:00.000Z',
      '2026-10-26T01:30:00.000Z',
    ]);
    const weekdays = { cron: '0 9 * * 1-5', at: null, timezone: 'America/New_York' };
    // Due Friday 09:00, nobody ran until Tuesday noon: one fire, Tuesday 09:00 (EST = UTC-5).
    const missed = newestMissed(
      weekdays,
      Date.parse('2026-12-04T14:00:00Z'),
      Date.parse('2026-12-08T17:00:00Z'),
    );
    assert.equal(new Date(missed).toISOString(), '2026-12-08T14:00:00.000Z');
    // Day of month and day of week as Vixie cron joins them: OR when both are restricted, AND when one starts with *.
    const days = (cron: string, n: number) => {
      const out: string[] = [];
      let x = Date.parse('2026-03-01T12:00:00Z');
      for (let i = 0; i < n; i++)
        out.push(
          new Date((x = nextFire({ cron, at: null, timezone: 'UTC' }, x)!)).toISOString().slice(0, 10),
        );
      return out;
    };
    assert.deepEqual(days('0 0 */10 * 5', 3), ['2026-05-01', '2026-07-31', '2026-08-21']);
    assert.deepEqual(days('0 0 13 * 5', 3), ['2026-03-06', '2026-03-13', '2026-03-20']);
    assert.deepEqual(days('0 0 * * 5', 2), ['2026-03-06', '2026-03-13']);
    assert.deepEqual(days('0 0 1,15 * *', 2), ['2026-03-15', '2026-04-01']);
    assert.equal(cronProblem('* * * * * *', 'UTC', false), 'a cron expression has 5 fields');
    assert.equal(cronProblem('@daily', 'UTC', false), 'a cron expression has 5 fields');
    assert.equal(cronProblem('*/5 9-17 * * MON-FRI', 'UTC', false), null);
  });

  it("takes due schedules tenant by tenant: one tenant's many do not all go before another's", () => {
    const due = [
      ['a1', 'a'],
      ['a2', 'a'],
      ['a3', 'a'],
      ['a4', 'a'],
      ['b1', 'b'],
      ['c1', 'c'],
      ['b2', 'b'],
    ] as const;
    assert.deepEqual(roundRobin(due), ['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'a4']);
    assert.deepEqual(roundRobin([]), []);
  });

  it('lists, ranges and steps follow the same DST rules: a repeated hour fires once, a gap once after it', () => {
    const fires = (cron: string, from: string, n: number) => {
      const t = { cron, at: null, timezone: 'America/New_York' };
      const out: string[] = [];
      let x = Date.parse(from);
      for (let i = 0; i < n; i++) out.push(new Date((x = nextFire(t, x)!)).toISOString());
      return out;
    };
    // 1 November 2026: 01:00–01:59 happens twice (EDT, then EST). Each time of it fires once, at its first occurrence.
    assert.deepEqual(fires('30 1,2 * * *', '2026-11-01T03:00:00Z', 3), [
      '2026-11-01T05:30:00.000Z',
      '2026-11-01T07:30:00.000Z',
      '2026-11-02T06:30:00.000Z',
    ]);
    assert.deepEqual(fires('*/30 1 * * *', '2026-11-01T03:00:00Z', 3), [
      '2026-11-01T05:00:00.000Z',
      '2026-11-01T05:30:00.000Z',
      '2026-11-02T06:00:00.000Z',
    ]);
    // 14 March 2027: 02:00–02:59 does not exist. Its times fire once, at 03:00 EDT; 03:30 still fires.
    assert.deepEqual(fires('*/15 2 * * *', '2027-03-14T05:00:00Z', 2), [
      '2027-03-14T07:00:00.000Z',
      '2027-03-15T06:00:00.000Z',
    ]);
    assert.deepEqual(fires('30 2,3 * * *', '2027-03-14T05:00:00Z', 3), [
      '2027-03-14T07:00:00.000Z',
      '2027-03-14T07:30:00.000Z',
      '2027-03-15T06:30:00.000Z',
    ]);
  });
});

describe('schedules', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let h: Harness;
  let r: Redis;
  let a: Api;
  let b: Api;

  const start = async () => {
    h = await startHarness({ env: ENV, redis, fakeServer: fake });
    a = h.api.as('key-a');
    b = h.api.as('key-b');
  };

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    // A session with the client tool `lookup` waits for its result (requires_action); any other one ends at once.
    fake.setHandler((req) => {
      const tools = (req.body.tools ?? []) as Array<{ name: string }>;
      const last = req.body.messages.at(-1);
      const answered = Array.isArray(last?.content) && last.content.some((c) => c.type === 'tool_result');
      return tools.some((t) => t.name === 'lookup') && !answered
        ? toolCall('lookup', {})
        : text('report ready');
    });
    r = new Redis(redis.url);
    await start();
  });
  after(async () => {
    r.disconnect();
    await h.close();
    await fake.close();
    await redis.stop();
  });

  const sessionsOf = async (api: Api, id: string) => {
    const res = await api.get(`/v1/schedules/${id}/runs?limit=100`);
    assert.equal(res.status, 200);
    return res.body.data as Array<{ id: string; status: string; metadata: Record<string, string> }>;
  };

  it('validates the body and answers the schedule', async () => {
    const bad = [
      { cron: '* * *', session: { input: 'x' } },
      { cron: '0 9 * * 1-5 * 2026', session: { input: 'x' } },
      { cron: '99 * * * *', session: { input: 'x' } },
      { cron: '0 9 * * *', timezone: 'Mars/Olympus', session: { input: 'x' } },
      { cron: '0 9 * * *', timezone: '+02:00', session: { input: 'x' } },
      { cron: '0 9 * * *', timezone: '-0500', session: { input: 'x' } },
      { cron: '0 9 * * *', at: new Date(Date.now() + 60_000).toISOString(), session: { input: 'x' } },
      { session: { input: 'x' } },
      { at: '2001-01-01T00:00:00Z', session: { input: 'x' } },
      { cron: '0 9 * * *', session: { input: 'x', tools: ['no_such_tool'] } },
      { cron: '0 9 * * *', session: { input: 'x', bogus: 1 } },
      { cron: '0 9 * * *', overlap: 'sometimes', session: { input: 'x' } },
    ];
    for (const body of bad) {
      const res = await a.post('/v1/schedules', body);
      assert.equal(res.status, 400, JSON.stringify(body) + ' → ' + JSON.stringify(res.body));
      assert.ok(['invalid_request', 'unknown_tool'].includes(res.body.error.code), JSON.stringify(res.body));
    }
    const res = await a.post('/v1/schedules', {
      cron: '0 9 * * 1-5',
      timezone: 'Europe/Paris',
      session: { input: 'Write the daily report.' },
    });
    assert.equal(res.status, 201);
    const s = res.body;
    assert.match(s.id, /^sch_/);
    assert.equal(s.cron, '0 9 * * 1-5');
    assert.equal(s.overlap, 'skip');
    assert.equal(s.paused, false);
    const next = new Date(s.next_run_at);
    assert.ok(next.getTime() > Date.now());
    const paris = new Intl.DateTimeFormat('en-GB', {
      timeZone: 'Europe/Paris',
      hour: '2-digit',
      minute: '2-digit',
      weekday: 'short',
    }).format(next);
    assert.match(paris, /^(Mon|Tue|Wed|Thu|Fri) 09:00$/);
    assert.equal(res.headers.get('etag'), '"1"');
    assert.equal((await a.get(`/v1/schedules/${s.id}`)).body.next_run_at, s.next_run_at);
    assert.equal((await a.req('DELETE', `/v1/schedules/${s.id}`)).status, 200);
    assert.equal((await a.get(`/v1/schedules/${s.id}`)).status, 404);
  });

  it('a zone stored before offsets were refused still resumes; names an out-of-range number as written', async () => {
    const res = await a.post('/v1/schedules', {
      cron: '0 9 * * *',
      timezone: 'Europe/Paris',
      paused: true,
      session: { input: 'x' },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const r = new Redis(h.redis.url);
    try {
      await r.hset(scheduleKeys(res.body.id).meta, 'timezone', '+02:00');
    } finally {
      r.disconnect();
    }
    const resumed = await a.req('PATCH', `/v1/schedules/${res.body.id}`, { paused: false });
    assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
    assert.equal(resumed.body.timezone, '+02:00');
    assert.notEqual(resumed.body.next_run_at, null);
    const moved = await a.req('PATCH', `/v1/schedules/${res.body.id}`, { timezone: '+03:00' });
    assert.equal(moved.status, 400, 'a zone given is checked');
    assert.equal((await a.req('DELETE', `/v1/schedules/${res.body.id}`)).status, 200);
    for (const [cron, said] of [
      ['0 0 0 * *', 'the day of month 0 is not in 1-31'],
      ['0 0 * 13 *', 'the month 13 is not in 1-12'],
      ['0 0 1-32 * *', 'the day of month 32 is not in 1-31'],
      ['0 0 32W * *', 'the day of month 32 is not in 1-31'],
      ['0 24 * * *', 'the hour 24 is not in 0-23'],
      ['60/5 * * * *', 'the minute 60 is not in 0-59'],
    ]) {
      const bad = await a.post('/v1/schedules', { cron, session: { input: 'x' } });
      assert.equal(bad.status, 400);
      assert.deepEqual(bad.body.error.details, [{ path: '/cron', message: said }], cron);
    }
  });

  it("indexes a schedule before writing it: a list keeps a create's entry in flight, drops an old one without a record", async () => {
    const r = new Redis(h.redis.url);
    try {
      const key = 't:{b}:schedules';
      const fresh = `${String(Date.now()).padStart(15, '0')}:sch_inflight0001`;
      const old = `${String(Date.now() - 120_000).padStart(15, '0')}:sch_abandoned001`;
      await r.zadd(key, 0, fresh, 0, old);
      assert.deepEqual((await b.get('/v1/schedules')).body.data, []);
      assert.deepEqual(await r.zrange(key, 0, -1), [fresh]);
      await r.zrem(key, fresh);
    } finally {
      r.disconnect();
    }
  });

  it('a retiming computed before a fire was claimed is computed again, not written over the claim', async () => {
    const made = (await a.post('/v1/schedules', { cron: '0 3 * * *', session: { input: 'x' } })).body;
    const cmd = new Redis(h.redis.url);
    try {
      const store = new ScheduleStore(cmd, new SessionStore(cmd, { eventLogMax: 1000 }));
      // Its next fire due by Redis's clock (a claim refuses one that is not: 'early'), out of the sweep's sight
      // (its due entry stays at 03:00).
      await cmd.hset(`s:{${made.id}}`, 'next_run_at', String(Date.now() - 60_000));
      const read = (await store.read(made.id))!;
      // A replica claims a fire (next_run_at moves; the revision stays) between a PATCH's read and its write.
      const fireAt = read.nextRunAt!;
      const skipped = {
        schedule_id: made.id,
        scheduled_for: new Date(fireAt).toISOString(),
        reason: 'overlap',
      };
      assert.equal(await store.claim(read, fireAt, fireAt + 86_400_000, 'skip', 0, skipped), 'ok');
      await assert.rejects(
        store.update(read, { timezone: 'Europe/Paris', next_run_at: String(fireAt + 3_600_000) }, [], {}),
        (err: unknown) => err instanceof FireRaced,
      );
      assert.equal((await store.read(made.id))!.nextRunAt, fireAt + 86_400_000, 'the claim stands');
      // Through the route, the change is computed again from the record now.
      const patched = await a.req('PATCH', `/v1/schedules/${made.id}`, { timezone: 'Europe/Paris' });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
    } finally {
      cmd.disconnect();
      await a.req('DELETE', `/v1/schedules/${made.id}`);
    }
  });

  /**
   * A ScheduleStore of a second replica whose first record read stalls once it has read (a look between its read and
   * its filing of the due entry): `hasRead` when it has, `release` lets it go on.
   */
  function stalledStore(cmd: Redis) {
    const store = new ScheduleStore(cmd, new SessionStore(cmd, { eventLogMax: 1000 }));
    let hasRead!: () => void;
    let release!: () => void;
    const read = new Promise<void>((ok) => (hasRead = ok));
    const gate = new Promise<void>((ok) => (release = ok));
    const own = store.read.bind(store);
    let first = true;
    store.read = async (id: string) => {
      const s = await own(id);
      if (first) {
        first = false;
        hasRead();
        await gate;
      }
      return s;
    };
    return { store, read, release };
  }

  it('a look that read a schedule before a PATCH retimed it does not file the old time over the new one', async () => {
    const made = (await a.post('/v1/schedules', { cron: '0 3 * * *', session: { input: 'x' } })).body;
    const cmd = new Redis(h.redis.url);
    try {
      // Another replica's tick ends by filing the schedule (`resync`): it has read the record (03:00), not filed yet.
      const other = stalledStore(cmd);
      const look = other.store.resync(made.id);
      await other.read;
      const patched = await a.req('PATCH', `/v1/schedules/${made.id}`, { cron: '30 4 * * *' });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      const next = Date.parse(patched.body.next_run_at);
      assert.equal(Number(await r.zscore('schedules:due', made.id)), next);
      other.release();
      await look;
      assert.equal(Number(await r.zscore('schedules:due', made.id)), next, "the PATCH's time stands");
    } finally {
      cmd.disconnect();
      await a.req('DELETE', `/v1/schedules/${made.id}`);
    }
  });

  it("a resume to the same next time is not undone by the pause's filing still on its way", async () => {
    const made = (await a.post('/v1/schedules', { cron: '0 3 * * *', session: { input: 'x' } })).body;
    const due = Date.parse(made.next_run_at);
    const meta = `s:{${made.id}}`;
    const cmd = new Redis(h.redis.url);
    try {
      // The pause is written; its filing (a drop) has read the entry and the record, and stalls.
      const pausing = stalledStore(cmd);
      await cmd.hset(meta, 'paused', '1');
      const pauseFiled = pausing.store.resync(made.id, true);
      await pausing.read;
      // The resume is written, to the same next time, and filed at once.
      await cmd.hset(meta, 'paused', '0');
      await h.service.app.schedules.store.resync(made.id, true);
      pausing.release();
      await pauseFiled;
      const score = await r.zscore('schedules:due', made.id);
      assert.ok(score !== null && Number(score) <= due, `due entry ${score}, next fire ${due}`);
    } finally {
      cmd.disconnect();
      await a.req('DELETE', `/v1/schedules/${made.id}`);
    }
  });

  it('a retiming that lands after a fire came due, before a sweep took it, fires it, then goes on at the new time', async () => {
    const made = (await a.post('/v1/schedules', { cron: '0 3 * * *', session: { input: 'x' } })).body;
    try {
      // Its fire due by Redis's clock, not yet taken: out of the sweep's sight (its due entry stays at 03:00).
      const [sec] = await r.time();
      const due = Number(sec) * 1000 - 2000;
      await r.hset(`s:{${made.id}}`, 'next_run_at', String(due));
      const patched = await a.req('PATCH', `/v1/schedules/${made.id}`, { cron: '30 4 * * *' });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      assert.equal(patched.body.next_run_at, new Date(due).toISOString(), 'the due fire is still the next');
      assert.equal(patched.body.cron, '30 4 * * *');
      await until(async () => (await a.get(`/v1/schedules/${made.id}`)).body.fires === 1, 20_000, 'the fire');
      const events = (await a.get(`/v1/schedules/${made.id}/events?limit=100`)).body.data as Array<{
        type: string;
        data: Record<string, unknown>;
      }>;
      const fired = events.filter((e) => e.type === 'schedule.fired' || e.type === 'schedule.skipped');
      assert.deepEqual(
        fired.map((e) => [e.type, e.data['scheduled_for']]),
        [['schedule.fired', new Date(due).toISOString()]],
      );
      const now = (await a.get(`/v1/schedules/${made.id}`)).body;
      const then = nextFire({ cron: '30 4 * * *', at: null, timezone: 'UTC' }, due);
      assert.equal(
        now.next_run_at,
        new Date(then!).toISOString(),
        "the new timing's first time after the change",
      );
      assert.equal((await sessionsOf(a, made.id)).length, 1);
      assert.equal(await r.hexists(`s:{${made.id}}`, 'next_after_due'), 0);
    } finally {
      await a.req('DELETE', `/v1/schedules/${made.id}`);
    }
  });

  it('keeps tenants apart and pages the list', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++)
      ids.push((await a.post('/v1/schedules', { cron: '0 3 * * *', session: { input: `n${i}` } })).body.id);
    const page1 = await a.get('/v1/schedules?limit=2');
    assert.deepEqual(
      page1.body.data.map((s: { id: string }) => s.id),
      [ids[2], ids[1]],
    );
    assert.equal(page1.body.has_more, true);
    const page2 = await a.get(`/v1/schedules?limit=2&cursor=${encodeURIComponent(page1.body.next_cursor)}`);
    assert.deepEqual(
      page2.body.data.map((s: { id: string }) => s.id),
      [ids[0]],
    );
    assert.deepEqual((await b.get('/v1/schedules')).body.data, []);
    for (const [method, path, body] of [
      ['GET', `/v1/schedules/${ids[0]}`],
      ['PATCH', `/v1/schedules/${ids[0]}`, { paused: true }],
      ['DELETE', `/v1/schedules/${ids[0]}`],
      ['GET', `/v1/schedules/${ids[0]}/runs`],
      ['GET', `/v1/schedules/${ids[0]}/events`],
    ] as const) {
      const res = await b.req(method, path, body);
      assert.equal(res.status, 404, `${method} ${path}`);
      assert.equal(res.body.error.code, 'schedule_not_found');
    }
    assert.equal((await h.api.as('').get(`/v1/schedules/${ids[0]}`)).status, 401);
    assert.equal((await a.get('/v1/schedules/not.an.id')).status, 400);
    assert.equal((await a.get('/v1/schedules/sch_missing')).status, 404);
    for (const id of ids) await a.req('DELETE', `/v1/schedules/${id}`);
  });

  it('bounds a page of the list by bytes: schedules holding big session bodies come a few a page', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await a.post('/v1/schedules', {
        cron: '0 3 * * *',
        session: { input: `n${i}`, system: `${i}`.repeat(400_000) },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body).slice(0, 300));
      ids.push(r.body.id);
    }
    // 1 MiB of bodies a page: two of 400 kB, then the third on the next page.
    const page1 = await a.get('/v1/schedules?limit=100');
    assert.deepEqual(
      page1.body.data.map((s: { id: string }) => s.id),
      [ids[2], ids[1]],
    );
    assert.equal(page1.body.has_more, true);
    const page2 = await a.get(`/v1/schedules?limit=100&cursor=${encodeURIComponent(page1.body.next_cursor)}`);
    assert.deepEqual(
      page2.body.data.map((s: { id: string }) => s.id),
      [ids[0]],
    );
    assert.equal(page2.body.has_more, false);
    for (const id of ids) await a.req('DELETE', `/v1/schedules/${id}`);
  });

  it("bounds a page of a schedule's runs by bytes: runs of big sessions come two a page, none skipped", async () => {
    const c = await a.post('/v1/schedules', {
      cron: '* * * * * *',
      overlap: 'allow',
      session: { input: 'hi', system: 'r'.repeat(400_000) },
    });
    assert.equal(c.status, 201, JSON.stringify(c.body).slice(0, 300));
    const id = c.body.id as string;
    await until(async () => (await a.get(`/v1/schedules/${id}`)).body.fires >= 3, 30_000, '3 fires');
    assert.equal((await a.req('PATCH', `/v1/schedules/${id}`, { paused: true })).status, 200);
    const k = scheduleKeys(id);
    await until(async () => (await r.hget(k.meta, 'pending')) === null, 10_000, 'the last fire finished');
    const all = await r.zrevrange(k.runs, 0, -1);
    const pages: Array<{ data: Array<{ id: string }>; next_cursor: string | null; has_more: boolean }> = [];
    let cursor: string | null = null;
    do {
      const p: { status: number; body: (typeof pages)[number] } = await a.get(
        `/v1/schedules/${id}/runs?limit=100${cursor ? `&cursor=${cursor}` : ''}`,
      );
      assert.equal(p.status, 200);
      const bytes = Buffer.byteLength(JSON.stringify(p.body));
      assert.ok(bytes <= 1_048_576, `a page of ${bytes} bytes`);
      pages.push(p.body);
      cursor = p.body.next_cursor;
      assert.equal(p.body.has_more, cursor !== null);
    } while (cursor !== null);
    // Two views of ~400 kB fit in 1 MiB, a third would take the page past it: it opens the next page.
    assert.deepEqual(
      pages.map((p) => p.data.length),
      all
        .map((_, i) => i)
        .filter((i) => i % 2 === 0)
        .map((i) => Math.min(2, all.length - i)),
    );
    assert.deepEqual(
      pages.flatMap((p) => p.data.map((x) => x.id)),
      all,
    );
    assert.equal((await a.req('DELETE', `/v1/schedules/${id}`)).status, 200);
  });

  it("reads a page of a schedule's runs in small rounds when its newest runs are deleted sessions", async () => {
    const c = await a.post('/v1/schedules', { cron: '0 0 1 1 *', session: { input: 'hi' } });
    assert.equal(c.status, 201, JSON.stringify(c.body).slice(0, 300));
    const id = c.body.id as string;
    // Six runs of ~400 kB sessions, the newest two deleted since (their members still in the runs set).
    const runs: string[] = [];
    for (let i = 0; i < 6; i++) {
      const s = await a.post('/v1/sessions', { start: false, params: { system: `${i}`.repeat(400_000) } });
      assert.equal(s.status, 201);
      runs.push(s.body.id);
      await r.zadd(scheduleKeys(id).runs, 1_000 + i, s.body.id);
    }
    for (const s of runs.slice(4)) assert.equal((await a.req('DELETE', `/v1/sessions/${s}`)).status, 200);
    // The sessions the page reads at once: with none measured yet (the two read were gone) at most two a round,
    // not the whole rest of the page.
    const index = h.service.app.store.index;
    const load = index.loadForPage;
    let inFlight = 0;
    let most = 0;
    index.loadForPage = async (...args: Parameters<typeof load>) => {
      most = Math.max(most, ++inFlight);
      try {
        return await load.apply(index, args);
      } finally {
        inFlight--;
      }
    };
    try {
      const p = await a.get(`/v1/schedules/${id}/runs?limit=100`);
      assert.equal(p.status, 200);
      assert.deepEqual(
        p.body.data.map((x: { id: string }) => x.id),
        [runs[3], runs[2]],
      );
      assert.ok(p.body.has_more);
    } finally {
      index.loadForPage = load;
    }
    assert.ok(most <= 2, `${most} sessions read at once`);
    assert.equal((await a.req('DELETE', `/v1/schedules/${id}`)).status, 200);
  });

  it('overlap allow creates a session at every fire; skip none while the last one waits', async () => {
    const body = { session: { input: 'triage', tools: [lookup] }, cron: '* * * * * *' };
    const allow = (await a.post('/v1/schedules', { ...body, overlap: 'allow' })).body;
    const skip = (await a.post('/v1/schedules', { ...body, overlap: 'skip' })).body;
    await until(async () => (await a.get(`/v1/schedules/${allow.id}`)).body.fires >= 3, 30_000, '3 fires');
    await until(async () => (await a.get(`/v1/schedules/${skip.id}`)).body.skips >= 2, 30_000, '2 skips');
    for (const s of [allow, skip])
      assert.equal((await a.req('PATCH', `/v1/schedules/${s.id}`, { paused: true })).status, 200);
    const allowed = await sessionsOf(a, allow.id);
    const skipped = await sessionsOf(a, skip.id);
    assert.ok(allowed.length >= 3);
    assert.equal(skipped.length, 1, 'skip: one session, waiting for its tool result, then no more');
    const s1 = skipped[0]!;
    assert.equal(s1.metadata['schedule_id'], skip.id);
    assert.ok(Number.isFinite(Date.parse(s1.metadata['scheduled_for']!)));
    await a.waitStatus(s1.id, 'requires_action');
    const events = (await a.get(`/v1/schedules/${skip.id}/events?limit=500`)).body.data;
    const types = events.map((e: { type: string }) => e.type);
    assert.equal(types.filter((t: string) => t === 'schedule.fired').length, 1);
    assert.ok(types.filter((t: string) => t === 'schedule.skipped').length >= 2);
    const sk = events.find((e: { type: string }) => e.type === 'schedule.skipped');
    assert.equal(sk.data.reason, 'overlap');
    assert.equal(sk.data.session_id, s1.id);
    // Every session of `allow` is its own fire, with its own time.
    const times = new Set(allowed.map((s) => s.metadata['scheduled_for']));
    assert.equal(times.size, allowed.length);
    // Once the last session is done, `skip` fires again.
    await a.req(
      'PUT',
      `/v1/sessions/${s1.id}/tool-results/${(await a.get(`/v1/sessions/${s1.id}`)).body.required_action.tool_calls[0].id}`,
      { content: 'done' },
    );
    await a.waitStatus(s1.id, 'idle', 20_000);
    const fires = (await a.get(`/v1/schedules/${skip.id}`)).body.fires;
    await a.req('PATCH', `/v1/schedules/${skip.id}`, { paused: false });
    await until(async () => (await a.get(`/v1/schedules/${skip.id}`)).body.fires > fires, 30_000, 'a fire');
    for (const s of [allow, skip]) await a.req('DELETE', `/v1/schedules/${s.id}`);
  });

  it('creates each fire that came due while a replica ran for its own time, however late (a backlog is no outage)', async () => {
    const s = (
      await a.post('/v1/schedules', {
        cron: '* * * * * *',
        overlap: 'allow',
        session: { input: 'per-second digest' },
      })
    ).body;
    // The replica ran all along (its beats), but got to this schedule late: its fires of the last seconds are owed.
    const since = Number(await r.hget('schedules:alive', 'since'));
    const nowSec = Math.floor(Date.now() / 1000) * 1000;
    const lateFrom = Math.max(nowSec - 6000, Math.ceil(since / 1000) * 1000);
    assert.ok(nowSec - lateFrom >= 3000, `the service ran for a few seconds (since ${since})`);
    await r.hset(`s:{${s.id}}`, 'next_run_at', String(lateFrom));
    await r.zadd('schedules:due', lateFrom, s.id);
    const owed = Array.from({ length: (nowSec - lateFrom) / 1000 + 1 }, (_, i) =>
      new Date(lateFrom + i * 1000).toISOString(),
    );
    await until(
      async () => {
        const times = new Set((await sessionsOf(a, s.id)).map((x) => x.metadata['scheduled_for']));
        return owed.every((t) => times.has(t)) ? true : null;
      },
      15_000,
      'a session for every late fire time',
    );
    assert.equal((await a.req('PATCH', `/v1/schedules/${s.id}`, { paused: true })).status, 200);
    await until(
      async () => ((await r.hget(`s:{${s.id}}`, 'pending')) === null ? true : null),
      10_000,
      'idle',
    );
    const runs = await sessionsOf(a, s.id);
    assert.equal(
      new Set(runs.map((x) => x.metadata['scheduled_for'])).size,
      runs.length,
      'one per fire time',
    );
    await a.req('DELETE', `/v1/schedules/${s.id}`);
  });

  it('fires once, late, after an outage, then at the next time in the future', async () => {
    const s = (await a.post('/v1/schedules', { cron: '* * * * *', session: { input: 'nightly triage' } }))
      .body;
    await h.close();
    // The outage: no service ran for ten minutes of per-minute fires (the replicas' last beat was before them).
    const missedFrom = Math.floor(Date.now() / 60_000) * 60_000 - 10 * 60_000;
    await r.hset(
      'schedules:alive',
      'since',
      String(missedFrom - 3_600_000),
      'last',
      String(missedFrom - 1000),
    );
    await r.hset(`s:{${s.id}}`, 'next_run_at', String(missedFrom));
    await r.zadd('schedules:due', missedFrom, s.id);
    await start();
    const fired = await until(
      async () => {
        const v = (await a.get(`/v1/schedules/${s.id}`)).body;
        return v.fires >= 1 ? v : null;
      },
      20_000,
      'the late fire',
    );
    const runs = await sessionsOf(a, s.id);
    assert.equal(runs.length, 1, 'one fire for the ten missed');
    const at = Date.parse(runs[0]!.metadata['scheduled_for']!);
    assert.ok(at > missedFrom + 9 * 60_000 - 1, 'the newest missed time');
    assert.equal(at % 60_000, 0);
    assert.ok(Date.parse(fired.next_run_at) > Date.now() - 1000 && Date.parse(fired.next_run_at) > at);
    assert.equal(fired.skips, 0);
    const ev = (await a.get(`/v1/schedules/${s.id}/events`)).body.data;
    assert.deepEqual(
      ev.map((e: { type: string }) => e.type),
      ['schedule.created', 'schedule.fired'],
    );
    assert.equal(ev[1].data.session_id, runs[0]!.id);
    assert.equal(ev[1].session_id, s.id);
    // Cursors: the page after the last event is empty; ids out of Redis's range are a 400, not Redis's error.
    assert.deepEqual((await a.get(`/v1/schedules/${s.id}/events?after=${ev[1].id}`)).body.data, []);
    for (const bad of [
      '1-99999999999999999999',
      '18446744073709551616-0',
      '18446744073709551615-18446744073709551616',
    ]) {
      const r = await a.get(`/v1/schedules/${s.id}/events?after=${bad}`);
      assert.equal(r.status, 400, bad);
      assert.equal(r.body.error.code, 'invalid_request');
    }
    await a.req('DELETE', `/v1/schedules/${s.id}`);
  });

  it('pauses and resumes', async () => {
    const s = (await a.post('/v1/schedules', { cron: '* * * * * *', session: { input: 'ping' } })).body;
    await until(async () => (await a.get(`/v1/schedules/${s.id}`)).body.fires >= 1, 20_000, 'a fire');
    const paused = await a.req('PATCH', `/v1/schedules/${s.id}`, { paused: true });
    assert.equal(paused.status, 200);
    assert.equal(paused.body.paused, true);
    assert.equal(paused.body.next_run_at, null);
    // A PATCH that changes nothing writes nothing: the same revision, no event (below: two updates only).
    for (const same of [{}, { paused: true }]) {
      const noop = await a.req('PATCH', `/v1/schedules/${s.id}`, same);
      assert.equal(noop.status, 200);
      assert.equal(noop.body.revision, paused.body.revision);
    }
    await until(async () => (await r.hget(`s:{${s.id}}`, 'pending')) === null, 20_000, 'no fire in flight');
    const n = (await a.get(`/v1/schedules/${s.id}`)).body.fires;
    // Due in Redis while paused: the sweep looks at it (and drops its due entry), and fires nothing.
    await r.hset(`s:{${s.id}}`, 'next_run_at', String(Date.now() - 5000));
    await r.zadd('schedules:due', Date.now() - 5000, s.id);
    await until(
      async () => (await r.zscore('schedules:due', s.id)) === null,
      20_000,
      'the sweep of the paused',
    );
    assert.equal((await a.get(`/v1/schedules/${s.id}`)).body.fires, n);
    assert.equal((await sessionsOf(a, s.id)).length, n);
    const resumed = await a.req('PATCH', `/v1/schedules/${s.id}`, { paused: false }, { 'if-match': '"1"' });
    assert.equal(resumed.status, 412, 'If-Match is the revision');
    const ok = await a.req(
      'PATCH',
      `/v1/schedules/${s.id}`,
      { paused: false },
      { 'if-match': `"${paused.body.revision}"` },
    );
    assert.equal(ok.status, 200);
    assert.ok(Date.parse(ok.body.next_run_at) >= Date.now() - 1000);
    // Each PATCH is an event of the schedule's log, at the revision it made; the refused one is not.
    const updates = (await a.get(`/v1/schedules/${s.id}/events?limit=500`)).body.data.filter(
      (e: { type: string }) => e.type === 'schedule.updated',
    );
    assert.deepEqual(
      updates.map((e: any) => [e.data.fields, e.data.paused, e.revision]),
      [
        [['paused'], true, paused.body.revision],
        [['paused'], false, ok.body.revision],
      ],
    );
    await until(
      async () => (await a.get(`/v1/schedules/${s.id}`)).body.fires > n,
      20_000,
      'a fire after resume',
    );
    await a.req('DELETE', `/v1/schedules/${s.id}`);
  });

  it('logs its creation, changes and deletion, and webhooks get them; a DELETE at an old revision is refused', async () => {
    const receiver = new WebhookReceiver();
    await receiver.start();
    try {
      const w = (
        await a.post('/v1/webhooks', {
          url: receiver.url,
          events: ['schedule.created', 'schedule.updated', 'schedule.deleted'],
        })
      ).body;
      receiver.setSecret(w.secret);
      const s = (
        await a.post('/v1/schedules', {
          cron: '0 9 * * 1-5',
          timezone: 'Europe/Paris',
          session: { input: 'the weekly report' },
        })
      ).body;
      const ev = (await a.get(`/v1/schedules/${s.id}/events`)).body.data;
      assert.equal(ev.length, 1);
      assert.equal(ev[0].type, 'schedule.created');
      assert.equal(ev[0].revision, 1);
      assert.deepEqual(ev[0].data, {
        schedule_id: s.id,
        cron: '0 9 * * 1-5',
        at: null,
        timezone: 'Europe/Paris',
        overlap: 'skip',
        paused: false,
        next_run_at: s.next_run_at,
      });
      const paused = await a.req('PATCH', `/v1/schedules/${s.id}`, { paused: true });
      assert.equal(paused.status, 200);
      const stale = await a.req('DELETE', `/v1/schedules/${s.id}`, undefined, { 'if-match': '"1"' });
      assert.equal(stale.status, 412, 'a DELETE at the revision before the PATCH');
      assert.equal((await a.get(`/v1/schedules/${s.id}`)).status, 200, 'still there');
      const del = await a.req('DELETE', `/v1/schedules/${s.id}`, undefined, {
        'if-match': `"${paused.body.revision}"`,
      });
      assert.equal(del.status, 200);
      assert.equal((await a.get(`/v1/schedules/${s.id}`)).status, 404);
      assert.equal((await a.get(`/v1/schedules/${s.id}/events`)).status, 404);
      // Deliveries are not ordered: all three, then by revision.
      const mine = () => receiver.accepted.filter((m) => m.body.session_id === s.id);
      await receiver.until(() => mine().length === 3);
      const got = mine().sort((x, y) => x.body.revision! - y.body.revision!);
      assert.deepEqual(
        got.map((m) => [m.body.type, m.body.revision]),
        [
          ['schedule.created', 1],
          ['schedule.updated', paused.body.revision],
          ['schedule.deleted', paused.body.revision + 1],
        ],
      );
      assert.deepEqual(got[2]!.body.data, { schedule_id: s.id });
      assert.equal(receiver.invalid, 0);
      await a.req('DELETE', `/v1/webhooks/${w.id}`);
    } finally {
      await receiver.close();
    }
  });

  it('delivers schedule.fired to webhooks; a one-shot `at` fires once', async () => {
    const receiver = new WebhookReceiver();
    await receiver.start();
    try {
      const w = (
        await a.post('/v1/webhooks', { url: receiver.url, events: ['schedule.fired', 'schedule.skipped'] })
      ).body;
      receiver.setSecret(w.secret);
      const s = (
        await a.post('/v1/schedules', {
          at: new Date(Date.now() + 300).toISOString(),
          session: { input: 'remind me' },
        })
      ).body;
      await receiver.until(() => receiver.accepted.some((m) => m.body.type === 'schedule.fired'));
      const m = receiver.accepted.find((x) => x.body.type === 'schedule.fired')!;
      assert.equal(m.body.session_id, s.id);
      assert.equal(m.body.data.schedule_id, s.id);
      const runs = await sessionsOf(a, s.id);
      assert.equal(runs.length, 1);
      assert.equal(m.body.data.session_id, runs[0]!.id);
      const v = (await a.get(`/v1/schedules/${s.id}`)).body;
      assert.equal(v.next_run_at, null);
      assert.equal(v.fires, 1);
      assert.equal(receiver.invalid, 0);
      await a.req('DELETE', `/v1/webhooks/${w.id}`);
      await a.req('DELETE', `/v1/schedules/${s.id}`);
    } finally {
      await receiver.close();
    }
  });

  it('a one-shot `at` does not fire again: a PATCH after its fire, or a resume after it passed, leaves it done', async () => {
    const s = (
      await a.post('/v1/schedules', {
        at: new Date(Date.now() + 300).toISOString(),
        session: { input: 'once' },
      })
    ).body;
    await until(
      async () => (await a.get(`/v1/schedules/${s.id}`)).body.fires === 1 || null,
      20_000,
      'its fire',
    );
    const p = await a.req('PATCH', `/v1/schedules/${s.id}`, { timezone: 'Europe/Paris' });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.next_run_at, null);
    // A paused one whose time has passed (a second ago: within the minute `at` may lie in the past).
    const paused = (
      await a.post('/v1/schedules', {
        at: new Date(Date.now() - 1000).toISOString(),
        paused: true,
        session: { input: 'x' },
      })
    ).body;
    const resumed = await a.req('PATCH', `/v1/schedules/${paused.id}`, { paused: false });
    assert.equal(resumed.status, 200);
    assert.equal(resumed.body.next_run_at, null, 'a fire missed while paused is not made up');
    assert.equal((await a.get(`/v1/schedules/${s.id}`)).body.fires, 1);
    for (const id of [s.id, paused.id]) await a.req('DELETE', `/v1/schedules/${id}`);
  });

  it('a keyed create retried after its record was lost answers the schedule made, though its body would be refused now', async () => {
    const put = await a.req('PUT', '/v1/tools/nightly_export', {
      description: 'Export the day.',
      input_schema: { type: 'object', properties: {} },
      runner: { type: 'worker' },
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    const body = { cron: '0 3 * * *', session: { input: 'export', tools: ['nightly_export'] } };
    const headers = { 'idempotency-key': 'sched-nightly' };
    const first = await a.req('POST', '/v1/schedules', body, headers);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    // The tool goes: a new create with this body is refused now.
    assert.equal((await a.req('DELETE', '/v1/tools/nightly_export')).status, 200);
    const fresh = await a.req('POST', '/v1/schedules', body, { 'idempotency-key': 'sched-other' });
    assert.equal(fresh.status, 400, JSON.stringify(fresh.body));
    // The first answer's record is lost, as when its request's process died between its write and its record.
    const records = (await r.keys('idem:{a}:*')).filter((k) => !k.includes('~'));
    assert.ok(records.length > 0);
    await r.del(...records);
    const retry = await a.req('POST', '/v1/schedules', body, headers);
    assert.equal(retry.status, 201, JSON.stringify(retry.body));
    assert.equal(retry.body.id, first.body.id);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    await a.req('DELETE', `/v1/schedules/${first.body.id}`);
  });

  it("the schedule routes know no session: a session's id is 404 there and the session is untouched", async () => {
    const ses = (await a.post('/v1/sessions', { input: 'mine', start: false })).body;
    assert.equal((await a.get(`/v1/schedules/${ses.id}`)).status, 404);
    const p = await a.req('PATCH', `/v1/schedules/${ses.id}`, {
      cron: '* * * * * *',
      session: { input: 'boom' },
    });
    assert.equal(p.status, 404);
    assert.equal(p.body.error.code, 'schedule_not_found');
    assert.equal((await a.req('DELETE', `/v1/schedules/${ses.id}`)).status, 404);
    const after = (await a.get(`/v1/sessions/${ses.id}`)).body;
    assert.equal(after.revision, ses.revision);
  });

  it('a fire refused by a quota is recorded as skipped', async () => {
    const qRedis = await startTestRedis();
    const q = await startHarness({
      env: { ...ENV, TENANT_MAX_SESSIONS: '2' },
      redis: qRedis,
      fakeServer: fake,
    });
    try {
      const qa = q.api.as('key-a');
      for (let i = 0; i < 2; i++)
        assert.equal((await qa.post('/v1/sessions', { input: 'x', start: false })).status, 201);
      const s = (await qa.post('/v1/schedules', { cron: '* * * * * *', session: { input: 'over' } })).body;
      const v = await until(
        async () => {
          const x = (await qa.get(`/v1/schedules/${s.id}`)).body;
          return x.skips >= 1 ? x : null;
        },
        20_000,
        'a refused fire',
      );
      assert.equal(v.fires, 0);
      const ev = (await qa.get(`/v1/schedules/${s.id}/events`)).body.data;
      assert.deepEqual(
        ev.slice(0, 2).map((e: { type: string }) => e.type),
        ['schedule.created', 'schedule.skipped'],
      );
      assert.equal(ev[1].data.reason, 'quota_exceeded');
      assert.equal(ev[1].data.error.details.quota, 'TENANT_MAX_SESSIONS');
      assert.equal((await qa.get('/v1/sessions')).body.data.length, 2);
    } finally {
      await q.close();
      await qRedis.stop();
    }
  });
});

describe("a fire while its tenant's runs are all busy (TENANT_MAX_ACTIVE_RUNS)", { timeout: 90_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { ...ENV, TENANT_MAX_ACTIVE_RUNS: '1' } });
  });
  after(() => h?.close());

  it('waits for a run slot and is tried again, rather than skipped', async () => {
    const a = h.api.as('key-a');
    const r = new Redis(h.redis.url);
    try {
      h.fake.setHandler((req) => (JSON.stringify(req.body.messages).includes('busy') ? hang() : text('ok')));
      const busy = await a.post('/v1/sessions', { input: 'busy' });
      assert.equal(busy.status, 201);
      const made = await a.post('/v1/schedules', {
        at: new Date(Date.now() + 500).toISOString(),
        session: { input: 'scheduled' },
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const key = `s:{${made.body.id}}`;
      // Claimed (pending, leased), refused for the busy slot, then tried again by a retake: a later lease.
      let first: string | null = null;
      for (const deadline = Date.now() + 30_000; ;) {
        assert.ok(Date.now() < deadline, 'the fire was tried again');
        const [pending, until] = await r.hmget(key, 'pending', 'pending_until');
        assert.ok(first === null || pending, 'the fire was ended (skipped) instead of waiting');
        if (pending && first === null) first = until ?? null;
        if (pending && first !== null && until !== first) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.equal((await a.post(`/v1/sessions/${busy.body.id}/cancel`, {})).status, 200);
      for (const deadline = Date.now() + 30_000; ;) {
        const s = (await a.get(`/v1/schedules/${made.body.id}`)).body;
        if (s.fires === 1) break;
        assert.equal(s.skips, 0, JSON.stringify(s));
        assert.ok(Date.now() < deadline, 'the fire created its session once a slot was free');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } finally {
      r.disconnect();
    }
  });
});

describe("one tenant's slow fires do not hold back another's", { timeout: 120_000 }, () => {
  let h: Harness;
  let tarpit: net.Server;
  const held: net.Socket[] = [];
  let hang = false;
  before(async () => {
    // An MCP server that accepts connections and never answers: each create naming it takes MCP_CONNECT_TIMEOUT_MS.
    tarpit = net.createServer((sock) => {
      sock.on('error', () => {});
      // Until the schedules exist it refuses at once (an unreachable server is accepted at create).
      if (!hang) return void sock.destroy();
      held.push(sock);
    });
    await new Promise<void>((resolve) => tarpit.listen(0, '127.0.0.1', resolve));
    h = await startHarness({ env: { ...ENV, MCP_CONNECT_TIMEOUT_MS: '30000' } });
  });
  after(async () => {
    for (const sock of held) sock.destroy();
    tarpit.close();
    await h?.close();
  });

  it("fires another tenant's schedule on time while 8 of one tenant's fires hang", async () => {
    const a = h.api.as('key-a');
    const b = h.api.as('key-b');
    const { port } = tarpit.address() as net.AddressInfo;
    const put = await a.req('PUT', '/v1/mcp-servers/slow', { url: `http://127.0.0.1:${port}/mcp` });
    assert.ok(put.status < 300, JSON.stringify(put.body));
    const slow = await Promise.all(
      Array.from({ length: 8 }, () =>
        a.post('/v1/schedules', {
          cron: '* * * * * *',
          overlap: 'allow',
          session: { input: 'a', start: false, tools: [{ mcp_server: 'slow' }] },
        }),
      ),
    );
    for (const m of slow) assert.equal(m.status, 201, JSON.stringify(m.body));
    hang = true;
    // Their fires are claimed and stuck (on the tarpit's connection) before b's schedule exists.
    const r = new Redis(h.redis.url);
    try {
      for (const deadline = Date.now() + 30_000; ;) {
        const pending = await Promise.all(slow.map((m) => r.hget(`s:{${m.body.id}}`, 'pending')));
        if (held.length > 0 && pending.filter((p) => p !== null).length >= 4) break;
        assert.ok(Date.now() < deadline, "a's fires are stuck");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      r.disconnect();
    }
    const sb = await b.post('/v1/schedules', { cron: '* * * * * *', session: { input: 'b', start: false } });
    assert.equal(sb.status, 201);
    // Three of b's fires while a's hang (for 30 s each): without a place of its own, none before they time out.
    for (const deadline = Date.now() + 15_000; ;) {
      const fired = (await b.get(`/v1/schedules/${sb.body.id}`)).body.fires as number;
      if (fired >= 3) break;
      assert.ok(Date.now() < deadline, `b's schedule fired ${fired} times in 15 s`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    for (const m of slow) await a.req('DELETE', `/v1/schedules/${m.body.id}`);
  });
});

describe('SCHEDULES_MAX_PER_TENANT', { timeout: 60_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: KEYS, SCHEDULES_MAX_PER_TENANT: '5' } });
  });
  after(() => h?.close());

  it('concurrent creates never take a tenant past it', async () => {
    const a = h.api.as('key-a');
    const body = { cron: '0 3 * * *', session: { input: 'x' } };
    for (let i = 0; i < 3; i++) assert.equal((await a.post('/v1/schedules', body)).status, 201);
    const made = await Promise.all(Array.from({ length: 12 }, () => a.post('/v1/schedules', body)));
    const statuses = made.map((m) => m.status).sort();
    assert.deepEqual(statuses, [...Array(2).fill(201), ...Array(10).fill(429)], JSON.stringify(statuses));
    const refused = made.find((m) => m.status === 429)!;
    assert.equal(refused.body.error.details.quota, 'SCHEDULES_MAX_PER_TENANT');
    const r = new Redis(h.redis.url);
    try {
      assert.equal(await r.zcard('t:{a}:schedules'), 5);
    } finally {
      r.disconnect();
    }
    assert.equal((await a.get('/v1/schedules?limit=100')).body.data.length, 5);
  });
});

describe(
  "a schedule's create body counts in its tenant's storage (TENANT_MAX_BYTES)",
  { timeout: 60_000 },
  () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ env: { API_KEYS: KEYS, TENANT_MAX_BYTES: '1500000' } });
    });
    after(() => h?.close());

    it('is charged at create, refused past the limit, given back at delete', async () => {
      const a = h.api.as('key-a');
      const body = (x: string) => ({ cron: '0 3 * * *', session: { input: 'x', system: x.repeat(900_000) } });
      const first = await a.post('/v1/schedules', body('a'));
      assert.equal(first.status, 201);
      const second = await a.post('/v1/schedules', body('b'));
      assert.equal(second.status, 429, JSON.stringify(second.body).slice(0, 300));
      assert.equal(second.body.error.code, 'quota_exceeded');
      assert.equal(second.body.error.details.quota, 'storage_bytes');
      // Listed and charged in one script (charge-3.lua): refused, it lists nothing.
      const r = new Redis(h.redis.url);
      try {
        assert.equal(await r.zcard('t:{a}:schedules'), 1);
      } finally {
        r.disconnect();
      }
      // Another tenant's storage is its own.
      assert.equal((await h.api.as('key-b').post('/v1/schedules', body('c'))).status, 201);
      assert.equal((await a.req('DELETE', `/v1/schedules/${first.body.id}`)).status, 200);
      assert.equal((await a.post('/v1/schedules', body('b'))).status, 201);
    });

    it('a session create refused at the limit leaves nothing behind: no index entry, no metadata entry, no run slot', async () => {
      const a = h.api.as('key-a');
      const r = new Redis(h.redis.url);
      try {
        const big = (n: number) => ({ input: 'x', system: 'z'.repeat(n), metadata: { job: 'nightly' } });
        for (let i = 0; ; i++) {
          const made = await a.post('/v1/sessions', { ...big(300_000), start: false });
          if (made.status === 429) break;
          assert.equal(made.status, 201, JSON.stringify(made.body).slice(0, 300));
          assert.ok(i < 10, 'the limit was reached');
        }
        const state = async () => ({
          indexed: await r.zcard('t:{a}:sessions'),
          metadata: await Promise.all((await r.keys('t:{a}:md:*')).map((k) => r.zcard(k))),
          runs: await r.zcard('q:{a}:runs'),
        });
        const before = await state();
        for (let i = 0; i < 3; i++) {
          const refused = await a.post('/v1/sessions', big(300_000 + i));
          assert.equal(refused.status, 429, JSON.stringify(refused.body).slice(0, 300));
          assert.equal(refused.body.error.details.quota, 'storage_bytes');
        }
        assert.deepEqual(await state(), before);
      } finally {
        r.disconnect();
      }
    });

    it('concurrent PATCHes of the create body charge what is stored, once', async () => {
      const c = h.api.as('key-b');
      const r = new Redis(h.redis.url);
      try {
        const bytes = async () => Number(await r.get('t:{b}:bytes'));
        const before = await bytes();
        const s = (await c.post('/v1/schedules', { cron: '0 3 * * *', session: { input: 'x' } })).body;
        const stored = () => r.hstrlen(`s:{${s.id}}`, 'session');
        assert.equal(await bytes(), before + (await stored()));
        const patches = await Promise.all(
          Array.from({ length: 10 }, (_, i) =>
            c.req('PATCH', `/v1/schedules/${s.id}`, { session: { input: `${i}`.repeat(20_000) } }),
          ),
        );
        assert.deepEqual(new Set(patches.map((x) => x.status)), new Set([200]));
        assert.equal(await bytes(), before + (await stored()), 'the body stored, counted once');
        assert.equal((await c.req('DELETE', `/v1/schedules/${s.id}`)).status, 200);
        assert.equal(await bytes(), before);
      } finally {
        r.disconnect();
      }
    });
  },
);
