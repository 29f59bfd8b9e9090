/**
 * For the tests of the writes that carry a session's whole history (a fork's copy, a compaction's segment), called
 * in a `describe`: a harness, a client of its redis-server for reading keys, and a MONITOR started once the history
 * is written (so that it sees the write under test); all closed after the suite. `h` and `redis` are read once the
 * suite's `before` has run.
 */
import { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { text } from '../fake/script.js';
import { monitorRedis, type RedisMonitor } from './redis-monitor.js';
import { startHarness, type Harness } from './service.js';

export function largeHistorySuite() {
  let h: Harness | undefined;
  let redis: Redis | undefined;
  let monitor: RedisMonitor | undefined;
  before(async () => {
    h = await startHarness();
    redis = new Redis(h.redis.url);
  });
  after(async () => {
    monitor?.stop();
    redis?.disconnect();
    await h?.close();
  });
  const started = () => {
    if (!h || !redis) throw new Error('largeHistorySuite: read before the suite started');
    return { h, redis };
  };
  return {
    get h() {
      return started().h;
    },
    get redis() {
      return started().redis;
    },
    /** Starts the suite's MONITOR of its redis-server (stopped after the suite). */
    async monitor(): Promise<RedisMonitor> {
      monitor = await monitorRedis(started().h.redis.port);
      return monitor;
    },
    /**
     * A session (not started, no stream) with one turn per text: the text as its message, answered `Noted <n>.`,
     * each turn waited out (idle at iteration n + 1). Its id.
     */
    async sessionWithTurns(texts: string[]): Promise<string> {
      const { h } = started();
      const created = await h.api.post('/v1/sessions', { start: false, stream: false });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.id as string;
      for (const [n, t] of texts.entries()) {
        h.fake.enqueue(text(`Noted ${n}.`));
        const r = await h.api.post(`/v1/sessions/${id}/messages`, { text: t });
        assert.equal(r.status, 202, JSON.stringify(r.body));
        await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === n + 1);
      }
      return id;
    },
  };
}
