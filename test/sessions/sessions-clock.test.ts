/**
 * What a session keeps on a clock is kept on Redis's, not on a replica's: a replica whose clock is minutes off
 * neither deletes a session (retention, `sessions:expiry`) before the `expires_at` the API showed, nor keeps it past
 * it; it creates a session with the `created_at` (and `expires_at`) a read shows, the clock of the tenant's index
 * (a list's grace for an entry whose write is on its way); its sub-agent tree's looks come neither early nor late;
 * its client tokens are neither refused before their `expires_at` nor accepted after it. The skewed replica is either a sweeper in this process with the process's Date.now() moved, beside the
 * service's own, or the whole service (its reckoning of Redis's clock read again, as its boot and each of its
 * sweeps do: src/redis/clock.ts).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { asReplica } from '../helpers/skewed-clock.js';
import { RetentionSweeper } from '../../src/sessions/retention.js';
import { EXPIRY_DUE_KEY } from '../../src/store/due.js';
import { sessionKeys, tenantIndexKey } from '../../src/store/keys.js';
import { treeDueKey } from '../../src/store/tree-due.js';
import { recordedSweep, writerWithResearcher } from '../helpers/agents.js';
import { watchToken } from '../../src/plugins/auth.js';
import { ClientTokens } from '../../src/store/client-tokens.js';

/** Far more than the TTLs below. */
const SKEW_MS = 10 * 60_000;

describe('sessions with a replica whose clock is off', { timeout: 60_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a' } });
    a = h.api.as('key-a');
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  /** One pass of a second replica's retention sweep, its clock off by `skew` ms. */
  const retentionPass = (skew: number) =>
    asReplica(h.service.app, skew, () =>
      new RetentionSweeper(h.service.app.store, h.service.app.log, 60_000).sweep(),
    );

  /** Redis's now (ms, to the microsecond). */
  const redisNow = async () => {
    const [s, us] = await r.time();
    return Number(s) * 1000 + Number(us) / 1000;
  };

  /** An idle session with `ttl_s`. */
  async function idle(ttlS: number): Promise<{ id: string; expiresAt: string }> {
    const made = await a.post('/v1/sessions', { input: 'x', start: false, ttl_s: ttlS });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return { id: made.body.id as string, expiresAt: made.body.expires_at as string };
  }

  describe('retention (sessions:expiry)', () => {
    it('a replica ahead does not delete a session before its expires_at', async () => {
      const { id } = await idle(300);
      const { expires_at: expiresAt } = (await a.get(`/v1/sessions/${id}`)).body;
      // 10 minutes ahead, the session's expires_at (5 minutes from now in Redis's clock) is long past.
      await retentionPass(SKEW_MS);
      const s = await a.get(`/v1/sessions/${id}`);
      assert.equal(s.status, 200, 'not deleted');
      assert.equal(s.body.expires_at, expiresAt);
    });

    it('a replica ahead that reads an early entry moves it on to expires_at', async () => {
      const { id } = await idle(300);
      const { expires_at: expiresAt } = (await a.get(`/v1/sessions/${id}`)).body;
      // An entry early (as one may be: the sweep moves it on), so this pass reads the session and compares.
      await r.zadd(EXPIRY_DUE_KEY, 1, id);
      await retentionPass(SKEW_MS);
      assert.equal((await a.get(`/v1/sessions/${id}`)).status, 200, 'not deleted');
      assert.equal(Number(await r.zscore(EXPIRY_DUE_KEY, id)), Date.parse(expiresAt));
    });

    it('a replica behind deletes a session whose expires_at has passed', async () => {
      const { id } = await idle(300);
      // Its last change 301 s ago in Redis's clock (its TTL over), its entry due then.
      const aged = Math.floor(await redisNow()) - 301_000;
      await r.hset(sessionKeys(id).meta, 'updated_at', aged);
      await r.zadd(EXPIRY_DUE_KEY, aged, id);
      // 10 minutes behind, by its own clock it is not due for another 5 minutes.
      await retentionPass(-SKEW_MS);
      assert.equal((await a.get(`/v1/sessions/${id}`)).status, 404, 'deleted');
      assert.equal(await r.zscore(EXPIRY_DUE_KEY, id), null);
    });

    it('a replica ahead writes an expiry entry no later than the expires_at a read shows', async () => {
      // A create 10 minutes ahead.
      const { id } = await asReplica(h.service.app, SKEW_MS, () => idle(300));
      const { expires_at: expiresAt } = (await a.get(`/v1/sessions/${id}`)).body;
      const at = Number(await r.zscore(EXPIRY_DUE_KEY, id));
      assert.ok(at <= Date.parse(expiresAt), `entry ${at - Date.parse(expiresAt)} ms after expires_at`);
      // A PATCH of a shorter ttl_s 10 minutes ahead.
      const other = await idle(3600);
      const patched = await asReplica(h.service.app, SKEW_MS, () =>
        a.req('PATCH', `/v1/sessions/${other.id}`, { ttl_s: 300 }),
      );
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      const now = (await a.get(`/v1/sessions/${other.id}`)).body;
      const then = Number(await r.zscore(EXPIRY_DUE_KEY, other.id));
      assert.ok(
        then <= Date.parse(now.expires_at),
        `entry ${then - Date.parse(now.expires_at)} ms after expires_at`,
      );
    });
  });

  describe("a session's created_at", () => {
    it('a replica ahead answers a create with the expires_at and created_at a read shows', async () => {
      const made = await asReplica(h.service.app, SKEW_MS, () =>
        a.post('/v1/sessions', { input: 'x', start: false, ttl_s: 300 }),
      );
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const read = (await a.get(`/v1/sessions/${made.body.id}`)).body;
      for (const k of ['created_at', 'updated_at', 'expires_at'])
        assert.equal(made.body[k], read[k], `the create's ${k} is the read's`);
      const age = (await redisNow()) - Date.parse(read.created_at);
      // The process's reckoning of Redis's clock is right to a few ms.
      assert.ok(age > -1_000 && age < 5_000, `created_at ${age} ms before Redis's now`);
    });

    it("a create's and a fork's answers, and their session.created, give the updated_at and expires_at a read at revision 1 shows", async () => {
      // The write stamps the time the create computed (apply-8.lua `now`), not Redis's TIME a few round trips later.
      const times = (v: Record<string, unknown>) => [v['created_at'], v['updated_at'], v['expires_at']];
      const check = async (made: { status: number; body: Record<string, unknown> }, what: string) => {
        assert.equal(made.status, 201, JSON.stringify(made.body));
        const read = await a.get(`/v1/sessions/${String(made.body['id'])}`);
        assert.equal(read.headers.get('etag'), '"1"');
        assert.deepEqual(times(made.body), times(read.body), `${what}: the answer is the read`);
        const events = (await a.get(`/v1/sessions/${String(made.body['id'])}/events?limit=10`)).body.data;
        const created = events.find((e: { type: string }) => e.type === 'session.created');
        assert.deepEqual(times(created.data), times(read.body), `${what}: session.created is the read`);
        assert.equal(read.body.updated_at, read.body.created_at, `${what}: made, not changed since`);
      };
      for (let i = 0; i < 3; i++) {
        const made = await a.post('/v1/sessions', { input: 'x', start: false, ttl_s: 300 });
        await check(made, 'create');
        await check(await a.post(`/v1/sessions/${made.body.id}/fork`, { at_iteration: 0 }), 'fork');
      }
    });

    it('a replica ahead listing keeps the index entry of a create whose write is on its way', async () => {
      // What a create leaves between its index entry and its write (create.ts insertSession), in Redis's clock.
      const member = h.service.app.store.index.member(await redisNow(), 'ses_on_its_way');
      await r.zadd(tenantIndexKey('acme'), 0, member);
      // 10 minutes ahead, the entry is older than the list's grace (60 s) by this replica's clock.
      const list = await asReplica(h.service.app, SKEW_MS, () => a.get('/v1/sessions?limit=100'));
      assert.equal(list.status, 200, JSON.stringify(list.body));
      assert.notEqual(await r.zscore(tenantIndexKey('acme'), member), null, 'the entry is kept');
      await r.zrem(tenantIndexKey('acme'), member);
    });
  });

  describe("the sub-agent trees' due sets ({agents}:due:*)", () => {
    before(async () => {
      // The service's own agents' sweep stays out: the passes here are the test's, each recorded.
      await h.service.app.agents.stop();
    });

    /** A tree's root (a session with an `agent` tool), idle: a member of its tenant's due set. */
    async function root(): Promise<string> {
      const made = await a.post('/v1/sessions', { ...writerWithResearcher, start: false });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      return made.body.id as string;
    }

    const score = async (id: string) => Number(await r.zscore(treeDueKey('acme'), id));

    /** One pass of an agents' sweep on a replica whose clock is off by `skew` ms: the members it looked at. */
    async function passAs(skew: number): Promise<string[]> {
      const { looked, pass } = recordedSweep(h.service.app);
      await asReplica(h.service.app, skew, pass);
      return looked;
    }

    it('a replica ahead does not look at a member before its time', async () => {
      const id = await root();
      const before = await score(id);
      // Due a minute from now in Redis's clock: 10 minutes ahead, long past.
      assert.ok(!(await passAs(SKEW_MS)).includes(id), 'not looked at');
      assert.equal(await score(id), before, 'not moved on');
    });

    it('a replica ahead watches a new member a minute from Redis’s now, and wakes it now', async () => {
      const id = await asReplica(h.service.app, SKEW_MS, root);
      const left = (await score(id)) - (await redisNow());
      assert.ok(left > 50_000 && left <= 60_000, `first look ${left} ms from Redis's now`);
      // Its run's end, 10 minutes ahead, wakes it: due now for every replica.
      await asReplica(h.service.app, SKEW_MS, () => h.service.app.store.runs.end(id, 'acme'));
      const woken = (await score(id)) - (await redisNow());
      assert.ok(woken <= 0, `woken ${woken} ms from Redis's now`);
      assert.ok((await passAs(0)).includes(id), 'looked at by the next pass');
    });

    it('a replica behind moves a member it looked at on from Redis’s now', async () => {
      const id = await root();
      await h.service.app.store.runs.end(id, 'acme');
      // 10 minutes behind, it looks at the woken root (idle: its next look an hour away).
      assert.ok((await passAs(-SKEW_MS)).includes(id), 'looked at');
      const next = (await score(id)) - (await redisNow());
      assert.ok(next > 3_590_000 && next <= 3_600_000, `next look ${next} ms from Redis's now`);
    });
  });

  describe("the tenant's spend day (GET /v1/usage, TENANT_MAX_COST_USD_PER_DAY)", () => {
    it('a turn a replica two days ahead commits counts in the UTC day of Redis’s clock', async () => {
      const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);
      const now = await redisNow();
      // Today and tomorrow (a run across midnight counts in either); the skewed replica's own day is two days on.
      const [today, tomorrow] = [day(now), day(now + 86_400_000)];
      const usage = async () =>
        (
          (await a.get(`/v1/usage?from=${today}&to=${tomorrow}`)).body.data as Array<{ input_tokens: number }>
        ).reduce((n, d) => n + d.input_tokens, 0);
      const before = await usage();
      // The day is taken when the turn's usage is recorded, just after its commit: read while still ahead.
      const counted = await asReplica(h.service.app, 2 * 86_400_000, async () => {
        const made = await a.post('/v1/sessions', { input: 'Count me today.' });
        assert.equal(made.status, 201, JSON.stringify(made.body));
        await a.waitStatus(made.body.id, 'idle');
        for (let i = 0; i < 100; i++) {
          if ((await usage()) > before) return true;
          await new Promise((r) => setTimeout(r, 50));
        }
        return false;
      });
      assert.ok(counted, 'the turn is in today’s row');
      const to = (await a.get('/v1/usage')).body.to;
      assert.ok([today, tomorrow].includes(to), `the default day is Redis’s today, not ${to}`);
    });
  });

  describe("client tokens' expires_at", () => {
    /** A token of a new session (`ttl_s` 60: its least), minted by this service as it is (or as `asReplica` has it). */
    async function mint(): Promise<{ id: string; token: string; expiresAt: string }> {
      const { id } = await idle(3600);
      const made = await a.post('/v1/client-tokens', { session_id: id, scopes: ['read'], ttl_s: 60 });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      return { id, token: made.body.token as string, expiresAt: made.body.expires_at as string };
    }

    const readWith = (id: string, token: string) => h.api.as(token).get(`/v1/sessions/${id}`);

    it('a replica ahead does not refuse a live token', async () => {
      const { id, token } = await mint();
      // 10 minutes ahead, the token (a minute left in Redis's clock) is long past by this replica's clock.
      const read = await asReplica(h.service.app, SKEW_MS, () => readWith(id, token));
      assert.equal(read.status, 200, JSON.stringify(read.body));
    });

    it('a replica behind does not accept a token past its expires_at', async () => {
      const { id, token } = await mint();
      // Its expires_at a second ago in Redis's clock (what a minute's wait would make of it).
      const field = `h:${createHash('sha256').update(token).digest('hex')}`;
      const rec = JSON.parse((await r.hget(sessionKeys(id).tokens, field))!);
      await r.hset(
        sessionKeys(id).tokens,
        field,
        JSON.stringify({ ...rec, expires_at: Math.floor(await redisNow()) - 1000 }),
      );
      // 10 minutes behind, it has 9 minutes left by this replica's clock.
      const read = await asReplica(h.service.app, -SKEW_MS, () => readWith(id, token));
      assert.equal(read.status, 401, JSON.stringify(read.body));
      assert.equal(read.body.error.code, 'token_expired');
    });

    it('a replica behind mints a token that expires ttl_s from Redis’s now, and it is accepted', async () => {
      const { id, token, expiresAt } = await asReplica(h.service.app, -SKEW_MS, mint);
      const left = Date.parse(expiresAt) - (await redisNow());
      // Minted with the process's reckoning of Redis's clock, right to a few ms.
      assert.ok(left > 50_000 && left <= 61_000, `expires_at ${left} ms from Redis's now`);
      assert.equal((await readWith(id, token)).status, 200);
    });

    it("a replica ahead does not end a live token's open stream at once", async (t) => {
      const { app } = h.service;
      const { token } = await mint();
      // The auth plugin's (its scope's decoration): the same store clock.
      const tokens = new ClientTokens(app.redis, app.store.clock, app.store.storage);
      const rec = (await tokens.lookup(token))!;
      const ended: string[] = [];
      await asReplica(h.service.app, SKEW_MS, async () => {
        // The stream's watch, its timers driven here (the token has a minute left in Redis's clock).
        t.mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
        try {
          const watch = watchToken(tokens, rec, 3_600_000, (err) => ended.push(err.code));
          t.mock.timers.tick(50_000);
          assert.deepEqual(ended, [], 'not ended 50 s in');
          t.mock.timers.tick(10_000);
          assert.deepEqual(ended, ['token_expired'], 'ended at its expires_at');
          watch.stop();
        } finally {
          t.mock.timers.reset();
        }
      });
    });
  });
});
