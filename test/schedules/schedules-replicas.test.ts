/**
 * Schedules across replicas and restarts: three service processes fire one schedule every second (6-field cron
 * under SCHEDULES_TEST_SECONDS, tests only) while one is SIGKILLed and replaced, then all are killed and started
 * again; every fire creates exactly one session (sessions == fires, one per fire time), and a fire claimed by a
 * replica killed before it created the session is created once by another.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { until } from '../durability/chaos-lib.js';

const ENV = { SCHEDULES_TEST_SECONDS: 'true', SCHEDULE_SWEEP_MS: '100', API_KEYS: 'a:key-a' };

describe('schedules across replicas', { timeout: 280_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let r: Redis;
  let procs: ServiceProcess[] = [];
  let n = 0;

  const spawn = (k: number) =>
    Promise.all(
      Array.from({ length: k }, () =>
        spawnService(serviceEnv(redis.url, fake.url, ENV), { name: `rep${n++}` }),
      ),
    );
  const api = () => procs.find((p) => p.running())!.api.as('key-a');
  const fires = async (id: string) => Number((await r.hget(`s:{${id}}`, 'fires')) ?? 0);

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    r = new Redis(redis.url);
    procs = await spawn(3);
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.kill()));
    r.disconnect();
    await fake.close();
    await redis.stop();
  });

  /** Every session of the tenant whose metadata names the schedule. */
  async function sessionsOf(id: string) {
    const out: Array<{ id: string; metadata: Record<string, string> }> = [];
    let cursor: string | null = null;
    do {
      const q: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
      const page = (await api().get(`/v1/sessions?limit=100${q}`)).body;
      out.push(
        ...page.data.filter((s: { metadata: Record<string, string> }) => s.metadata['schedule_id'] === id),
      );
      cursor = page.next_cursor;
    } while (cursor);
    return out;
  }

  it('creates exactly one session per fire through kills and a full restart', async () => {
    const created = await api().post('/v1/schedules', {
      cron: '* * * * * *',
      overlap: 'allow',
      session: { input: 'hourly digest' },
    });
    assert.equal(created.status, 201);
    const id = created.body.id as string;
    await until(async () => (await fires(id)) >= 6, 60_000, '6 fires');
    // SIGKILL one replica (maybe between a claim and its create) and start another.
    await procs[0]!.kill();
    procs = [...procs.slice(1), ...(await spawn(1))];
    await until(async () => (await fires(id)) >= 12, 60_000, '12 fires');
    // Every replica dies: an outage, then a restart.
    await Promise.all(procs.map((p) => p.kill()));
    const before = await fires(id);
    procs = await spawn(3);
    await until(async () => (await fires(id)) >= Math.max(20, before + 4), 90_000, '20 fires');
    assert.equal((await api().req('PATCH', `/v1/schedules/${id}`, { paused: true })).status, 200);
    await until(async () => (await r.hget(`s:{${id}}`, 'pending')) === null, 30_000, 'no fire pending');

    const schedule = (await api().get(`/v1/schedules/${id}`)).body;
    const sessions = await sessionsOf(id);
    const runs = (await api().get(`/v1/schedules/${id}/runs?limit=100`)).body.data;
    const times = new Set(sessions.map((s) => s.metadata['scheduled_for']));
    assert.equal(sessions.length, schedule.fires, 'sessions == fires');
    assert.equal(times.size, sessions.length, 'one session per fire time');
    assert.equal(runs.length, sessions.length);
    assert.ok(schedule.fires >= 20);
    assert.equal(schedule.skips, 0);
  });

  it('a fire claimed by a replica killed before the create is created once, by another', async () => {
    const id = (await api().post('/v1/schedules', { cron: '0 0 1 1 *', session: { input: 'new year' } })).body
      .id as string;
    // What a replica killed right after claim-2.lua leaves: the fire pending, its lease over.
    const fireAt = Date.parse('2026-01-01T00:00:00Z');
    await r.hset(`s:{${id}}`, 'pending', String(fireAt), 'pending_until', String(Date.now() - 1));
    await r.zadd('schedules:due', Date.now() - 1, id);
    await until(async () => (await fires(id)) === 1, 30_000, 'the retried fire');
    const sessions = await sessionsOf(id);
    // The ids in the message: a clean-clone run once found 2 here (not explained yet; see the stop note).
    assert.equal(sessions.length, 1, `sessions of the fire: ${JSON.stringify(sessions.map((s) => s.id))}`);
    const expected = `ses_${createHash('sha256').update(`${id}:${fireAt}`).digest('hex').slice(0, 24)}`;
    assert.equal(sessions[0]!.id, expected, 'the id derived from the fire');
    // Replayed again (a second replica's late retry): the session exists, nothing new is created.
    await r.hset(`s:{${id}}`, 'pending', String(fireAt), 'pending_until', String(Date.now() - 1));
    await r.zadd('schedules:due', Date.now() - 1, id);
    await until(async () => (await r.hget(`s:{${id}}`, 'pending')) === null, 30_000, 'the replay');
    assert.equal((await sessionsOf(id)).length, 1);
  });
});
