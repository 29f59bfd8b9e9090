import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { monitorRedis } from '../helpers/redis-monitor.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { Redis } from 'ioredis';
import { hang, text, toolCall } from '../fake/script.js';
import { InvalidStatus } from '../../src/errors.js';

/**
 * Redis commands the service sends for one iteration of a run (a turn that calls a server tool, and the tool's
 * result), counted with MONITOR: commands of the service's clients that name the session (its keys, channels or
 * its id in the run queue), not the commands a script runs inside Redis. A run of 6 iterations less a run of 2,
 * divided by 4, leaves out what every run costs once (claim, lease, start and end).
 */
describe('Redis round trips per iteration', () => {
  let h: Harness;
  let monitor: Awaited<ReturnType<typeof monitorRedis>>;
  /** MONITOR lines of commands sent by clients (not run by scripts), as `cmd arg arg …`, lower case. */
  const lines = () => monitor.commands.map((args) => args.join(' ').toLowerCase());
  before(async () => {
    h = await startHarness({ env: { LEASE_TTL_MS: '60000' } });
    monitor = await monitorRedis(h.redis.port);
  });
  after(async () => {
    monitor?.stop();
    await h?.close();
  });

  async function commandsFor(iterations: number): Promise<Map<string, number>> {
    const created = await h.api.post('/v1/sessions', { tools: ['calculate_sum'], start: false });
    const id = created.body.id as string;
    for (let i = 0; i < iterations - 1; i++) h.fake.enqueue(toolCall('calculate_sum', { a: i, b: 1 }));
    h.fake.enqueue(text('done'));
    monitor.commands.length = 0;
    const sent = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'add' });
    assert.equal(sent.status, 202);
    // Waited for in MONITOR's lines, not by reading the session (the harness's reads would be counted).
    // The run's last commands: its due entry dropped (run-due-drop-1.lua: the one key runs:due, then the id), then
    // its lease released (release-2 takes the lease first, then the meta hash; renew-1 takes the lease alone, and
    // no renewal comes within the 60 s TTL). MONITOR lines arrive after the commands ran.
    const ended = ` 1 runs:due ${id} `.toLowerCase();
    const released = ` 2 s:{${id}}:l `.toLowerCase();
    const deadline = Date.now() + 60_000;
    const script = (marker: string) => lines().some((l) => l.startsWith('eval') && l.includes(marker));
    while (!(script(ended) && script(released))) {
      assert.ok(Date.now() < deadline, 'the run ended');
      await new Promise((r) => setTimeout(r, 10));
    }
    const counts = new Map<string, number>();
    for (const l of lines()) {
      if (!l.includes(id.toLowerCase())) continue;
      const [cmd, , numkeys, key] = l.split(' ');
      // Scripts by their keys: apply has 8, append-events 2 (meta, events).
      const name = cmd === 'evalsha' ? `evalsha/${numkeys}:${key!.replace(id.toLowerCase(), 'id')}` : cmd!;
      counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'idle');
    assert.equal(s.iteration, iterations);
    return counts;
  }

  const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);

  it('one write per iteration at most, a fixed number of commands', async (t) => {
    await commandsFor(2); // warm-up: scripts loaded
    const two = await commandsFor(2);
    const six = await commandsFor(10);
    const per = (total(six) - total(two)) / 8;
    const byCommand = Object.fromEntries(
      [...six.keys()].map((k) => [k, ((six.get(k) ?? 0) - (two.get(k) ?? 0)) / 8]),
    );
    t.diagnostic(`commands per iteration: ${per} ${JSON.stringify(byCommand)}`);
    t.diagnostic(`2 iterations: ${JSON.stringify(Object.fromEntries(two))}`);
    // Today: one commit (apply: the reply, the tool's results, the events), the turn's live events (append-events,
    // batched by the stream relay), the state read at each step, and the record of the turn's spend in its tenant's
    // day (record-2.lua; sent before too, now counted here as it names the session, its spend counted once per seq).
    // A route's guarded write may be tried twice when the run wrote in between (a CAS retry): ±1 write per run, so
    // the difference of an 8-iteration gap is rounded.
    assert.equal(Math.round(byCommand['evalsha/8:s:{id}'] ?? 0), 1, 'one commit per iteration');
    assert.ok(per <= 5, `${per} commands per iteration`);
    assert.equal(byCommand['lrange'] ?? 0, 0, 'the history is not read back at each iteration');
  });

  /**
   * A write that starts a run without its tenant given (a leftover compaction's, store.apply) takes the run slot of
   * the tenant it read for the storage count: the session's tenant is not read again. Refused by its guard here (the
   * session is idle), so nothing runs; the reads before the script are what is counted.
   */
  it('a run started without its tenant given reads the session’s tenant no second time', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    assert.equal(created.status, 201);
    const id = created.body.id as string;
    const store = h.service.app.store;
    assert.ok(await store.load(id)); // as leftoverCompaction does: the store knows whose session it is
    await monitor.settle();
    monitor.commands.length = 0;
    await assert.rejects(
      store.apply(id, { status: ['running'] }, { hset: { status: 'running' } }),
      (err: unknown) => err instanceof InvalidStatus,
    );
    await monitor.settle();
    const tenantReads = monitor.commands.filter(
      (c) => c[0]!.toLowerCase() === 'hget' && c[1]!.includes(id) && c[2] === 'tenant',
    );
    assert.equal(tenantReads.length, 0, JSON.stringify(tenantReads));
  });

  /**
   * A follow-up to an idle session, from its POST to the model request it causes: the route's write, the claim, the
   * run's one read of the session and its history, the commit that makes the follow-up a user turn. Counted up to a
   * marker command sent once the fake Anthropic API has the request (its reply hangs, so the run sends nothing more).
   */
  it('a follow-up reaches the model in at most 11 commands, one LRANGE of the history', async (t) => {
    const marker = new Redis(h.redis.url);
    try {
      const created = await h.api.post('/v1/sessions', { input: 'hi' });
      const id = created.body.id as string;
      await h.api.waitStatus(id, 'idle', 20_000);
      // The first run's last command: its lease released (release-2 takes the lease key first).
      const released = (c: string[]) =>
        c[0]!.toLowerCase().startsWith('eval') && c[2] === '2' && c[3] === `s:{${id}}:l`;
      const ended = Date.now() + 20_000;
      while (!monitor.commands.some(released)) {
        assert.ok(Date.now() < ended, 'the first run ended');
        await new Promise((r) => setTimeout(r, 10));
      }
      // The event stream the wait followed (if it did) has left: its UNSUBSCRIBE is the wait's, not the follow-up's.
      while (Number((await marker.pubsub('NUMSUB', `ev:{${id}}`))[1]) !== 0) {
        assert.ok(Date.now() < ended, "the wait's event stream left");
        await new Promise((r) => setTimeout(r, 10));
      }
      await monitor.settle();
      h.fake.enqueue(hang());
      const before = h.fake.requests.length;
      monitor.commands.length = 0;
      const sent = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'and then?' });
      assert.equal(sent.status, 202);
      await h.fake.waitForRequests(before + 1, 20_000);
      const mark = `marker-${id}`;
      await marker.echo(mark);
      const deadline = Date.now() + 20_000;
      while (!monitor.commands.some((c) => c[1] === mark)) {
        assert.ok(Date.now() < deadline, 'the marker reached MONITOR');
        await new Promise((r) => setTimeout(r, 10));
      }
      const upTo = monitor.commands.findIndex((c) => c[1] === mark);
      const naming = monitor.commands.slice(0, upTo).filter((c) => c.join(' ').includes(id));
      const counts: Record<string, number> = {};
      for (const c of naming) {
        const name = c[0]!.toLowerCase();
        counts[name] = (counts[name] ?? 0) + 1;
      }
      t.diagnostic(`follow-up to model request: ${naming.length} commands ${JSON.stringify(counts)}`);
      t.diagnostic(naming.map((c) => c.slice(0, 4).join(' ').slice(0, 120)).join('\n'));
      const lranges = naming.filter((c) => c[0]!.toLowerCase() === 'lrange' && c[1] === `s:{${id}}:m`);
      assert.equal(lranges.length, 1, 'one LRANGE of the history');
      assert.ok(naming.length <= 11, `${naming.length} commands`);
      await h.api.post(`/v1/sessions/${id}/cancel`);
      await h.api.waitStatus(id, 'idle', 20_000);
    } finally {
      marker.disconnect();
    }
  });
});
