import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from './helpers/service.js';
import { text, toolCall } from '../src/fake/script.js';

/**
 * Redis commands the service sends for one iteration of a run (a turn that calls a server tool, and the tool's
 * result), counted with MONITOR: commands of the service's clients that name the session (its keys, channels or
 * its id in the run queue), not the commands a script runs inside Redis. A run of 6 iterations less a run of 2,
 * divided by 4, leaves out what every run costs once (claim, lease, start and end).
 */
describe('Redis round trips per iteration', () => {
  let h: Harness;
  let client: Redis;
  let monitor: Awaited<ReturnType<Redis['monitor']>>;
  let lines: string[] = [];
  before(async () => {
    h = await startHarness({ env: { LEASE_TTL_MS: '60000' } });
    client = new Redis(h.redis.url);
    monitor = await client.monitor();
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (!source.includes('lua')) lines.push(args.join(' '));
    });
  });
  after(async () => {
    monitor?.disconnect();
    client?.disconnect();
    await h?.close();
  });

  async function commandsFor(iterations: number): Promise<Map<string, number>> {
    const created = await h.api.post('/v1/sessions', { tools: ['calculate_sum'], start: false });
    const id = created.body.id as string;
    for (let i = 0; i < iterations - 1; i++) h.fake.enqueue(toolCall('calculate_sum', { a: i, b: 1 }));
    h.fake.enqueue(text('done'));
    lines = [];
    const sent = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'add' });
    assert.equal(sent.status, 202);
    const s = await h.api.waitStatus(id, 'idle', 20_000);
    assert.equal(s.iteration, iterations);
    // The run's last command: its due entry dropped (MONITOR lines arrive after the commands ran).
    const ended = `zrem runs:due ${id}`.toLowerCase();
    for (let i = 0; !lines.some((l) => l.toLowerCase() === ended); i++) {
      assert.ok(i < 1000, 'the run ended');
      await new Promise((r) => setTimeout(r, 10));
    }
    const counts = new Map<string, number>();
    for (const l of lines) {
      if (!l.includes(id)) continue;
      const [cmd, , numkeys, key] = l.toLowerCase().split(' ');
      // Scripts by their keys: apply has 6, append-events 2 (meta, events).
      const name = cmd === 'evalsha' ? `evalsha/${numkeys}:${key!.replace(id.toLowerCase(), 'id')}` : cmd!;
      counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    return counts;
  }

  const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);

  it('one write per iteration at most, a fixed number of commands', async (t) => {
    await commandsFor(2); // warm-up: scripts loaded
    const two = await commandsFor(2);
    const six = await commandsFor(6);
    const per = (total(six) - total(two)) / 4;
    const byCommand = Object.fromEntries(
      [...six.keys()].map((k) => [k, ((six.get(k) ?? 0) - (two.get(k) ?? 0)) / 4]),
    );
    t.diagnostic(`commands per iteration: ${per} ${JSON.stringify(byCommand)}`);
    t.diagnostic(`2 iterations: ${JSON.stringify(Object.fromEntries(two))}`);
    // Today: one commit (apply: the reply, the tool's results, the events), the turn's live events (append-events,
    // batched by the stream relay), the state read at each step.
    assert.equal(byCommand['evalsha/6:s:{id}'], 1, 'one commit per iteration');
    assert.ok(per <= 5, `${per} commands per iteration`);
    assert.equal(byCommand.lrange ?? 0, 0, 'the history is not read back at each iteration');
  });
});
