/**
 * A schedule's create body in its tenant's storage count (TENANT_MAX_BYTES, `t:{tenant}:bytes`) when the replica
 * writing it is killed between its steps (src/schedules/charges.ts): the record is in the schedule's slot and the
 * count in the tenant's, so they are two steps, and the count must come right once the sweep of any replica has run.
 *
 * The killed replica is a ScheduleStore on a Redis connection of its own whose command at the kill point never answers
 * (before it is sent, or after it ran): nothing after it is sent, as of a process SIGKILLed there. The repair is
 * another replica's sweep (the service's store), run at a time past the intents' grace.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { ScheduleStore } from '../../src/schedules/store.js';
import { SessionStore } from '../../src/store/store.js';
import { newScheduleId, type ScheduleRecord } from '../../src/schedules/keys.js';
import type { Api } from '../helpers/service.js';

/** A time past every intent's grace (charges.ts CHARGE_GRACE_MS, a minute). */
const LATER = () => Date.now() + 10 * 60_000;

type Step = 'schedCreate' | 'schedUpdate' | 'schedDelete';

describe(
  "a schedule's bytes when its replica is killed between the charge and the record",
  { timeout: 60_000 },
  () => {
    let h: Harness;
    let r: Redis;
    let a: Api;
    const killed: Redis[] = [];
    before(async () => {
      h = await startHarness({ env: { API_KEYS: 'a:key-a', TENANT_MAX_BYTES: '100000000' } });
      r = new Redis(h.redis.url);
      a = h.api.as('key-a');
    });
    after(async () => {
      for (const c of killed) c.disconnect();
      r?.disconnect();
      await h?.close();
    });

    const count = async () => Number((await r.get('t:{a}:bytes')) ?? 0);
    const ledger = () => r.hgetall('t:{a}:schedule_bytes');
    const intents = () => r.zcard('schedules:charges');
    /** Another replica's sweep, run once the intents are due. */
    const sweep = () => h.service.app.schedules.store.settleCharges(LATER());

    /**
     * A replica's store whose `step` never answers: `before` it is sent, or `after` it ran. The call in flight is left
     * hanging, as its process would be.
     */
    function doomed(step: Step, when: 'before' | 'after'): { store: ScheduleStore; dead: Promise<void> } {
      const cmd = new Redis(h.redis.url);
      killed.push(cmd);
      const store = new ScheduleStore(cmd, new SessionStore(cmd, { eventLogMax: 1000 }));
      const own = Reflect.get(cmd, step) as (...args: unknown[]) => Promise<unknown>;
      let die!: () => void;
      const dead = new Promise<void>((ok) => (die = ok));
      Reflect.set(cmd, step, async (...args: unknown[]) => {
        if (when === 'after') await own.apply(cmd, args);
        die();
        return new Promise(() => {});
      });
      return { store, dead };
    }

    const body = (text: string) => JSON.stringify({ input: 'x', system: text });

    it('a create killed after its charge, before its record: the sweep gives the charge back', async () => {
      const before = await count();
      const now = Date.now();
      const s: ScheduleRecord = {
        id: newScheduleId(),
        tenant: 'a',
        revision: 1,
        cron: '0 3 1 1 *',
        at: null,
        timezone: 'UTC',
        overlap: 'skip',
        paused: true,
        session: body('é'.repeat(5000)),
        nextRunAt: null,
        pending: null,
        pendingUntil: 0,
        lastFireAt: null,
        lastSession: null,
        fires: 0,
        skips: 0,
        createdAt: now,
        updatedAt: now,
      };
      const { store, dead } = doomed('schedCreate', 'before');
      void store.create(s, 100);
      await dead;
      assert.equal(await count(), before + Buffer.byteLength(s.session), 'charged before the record');
      assert.equal(await r.exists(`s:{${s.id}}`), 0);
      // Not due yet: a write in flight settles its own.
      await h.service.app.schedules.store.settleCharges(Date.now());
      assert.equal(await count(), before + Buffer.byteLength(s.session));
      await sweep();
      assert.equal(await count(), before);
      assert.equal((await ledger())[s.id], undefined);
      assert.equal(await intents(), 0);
    });

    it("a PATCH killed after its charge, before its write: the sweep settles the count to the record's body", async () => {
      const made = await a.post('/v1/schedules', {
        cron: '0 3 1 1 *',
        paused: true,
        session: { input: 'small' },
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const stored = async () => r.hstrlen(`s:{${made.body.id}}`, 'session');
      const base = (await count()) - (await stored());
      const { store, dead } = doomed('schedUpdate', 'before');
      const s = (await store.read(made.body.id))!;
      const bigger = body('z'.repeat(20_000));
      void store.update(s, { session: bigger }, [], { fields: ['session'] }, s.revision);
      await dead;
      assert.equal(
        await count(),
        base + Buffer.byteLength(bigger),
        'the larger body charged before its write',
      );
      await sweep();
      assert.equal(await count(), base + (await stored()), 'the body the record kept, counted once');
      assert.equal(Number((await ledger())[made.body.id]), await stored());
      assert.equal(await intents(), 0);
      assert.equal((await a.req('DELETE', `/v1/schedules/${made.body.id}`)).status, 200);
      assert.equal(await count(), base);
    });

    it('a delete killed after its script, before its bytes were given back: the sweep gives them back', async () => {
      const before = await count();
      const made = await a.post('/v1/schedules', {
        cron: '0 3 1 1 *',
        paused: true,
        session: { input: 'x', system: 'y'.repeat(30_000) },
      });
      assert.equal(made.status, 201);
      assert.ok((await count()) > before + 30_000);
      const { store, dead } = doomed('schedDelete', 'after');
      void store.remove('a', made.body.id);
      await dead;
      assert.equal(await r.exists(`s:{${made.body.id}}`), 0, 'deleted');
      assert.ok((await count()) > before + 30_000, 'still counted');
      await sweep();
      assert.equal(await count(), before);
      assert.equal((await ledger())[made.body.id], undefined);
      assert.equal(await intents(), 0);
    });

    it('a schedule from before the ledger (counted by its .length) is given back what was counted', async () => {
      const before = await count();
      const made = await a.post('/v1/schedules', {
        cron: '0 3 1 1 *',
        paused: true,
        session: { input: 'x', system: 'é'.repeat(10_000) },
      });
      assert.equal(made.status, 201);
      const key = `s:{${made.body.id}}`;
      // As the version before the ledger left it: no `charged` field, no entry, the body's `.length` counted.
      const length = (await r.hget(key, 'session'))!.length;
      await r.hdel(key, 'charged');
      await r.hdel('t:{a}:schedule_bytes', made.body.id);
      await r.set('t:{a}:bytes', String(before + length));
      const smaller = { input: 'x', system: 'é'.repeat(2000) };
      const patched = await a.req('PATCH', `/v1/schedules/${made.body.id}`, { session: smaller });
      assert.equal(patched.status, 200, JSON.stringify(patched.body).slice(0, 300));
      assert.equal(
        await count(),
        before + (await r.hstrlen(key, 'session')),
        'adopted, then settled to its bytes',
      );
      assert.equal((await a.req('DELETE', `/v1/schedules/${made.body.id}`)).status, 200);
      assert.equal(await count(), before);
      const legacy = await a.post('/v1/schedules', {
        cron: '0 3 1 1 *',
        paused: true,
        session: { input: 'x', system: 'ü'.repeat(3000) },
      });
      const k2 = `s:{${legacy.body.id}}`;
      const length2 = (await r.hget(k2, 'session'))!.length;
      await r.hdel(k2, 'charged');
      await r.hdel('t:{a}:schedule_bytes', legacy.body.id);
      await r.set('t:{a}:bytes', String(before + length2));
      assert.equal((await a.req('DELETE', `/v1/schedules/${legacy.body.id}`)).status, 200);
      assert.equal(await count(), before, 'its delete gives back what was counted');
    });
  },
);
