/**
 * Backpressure on the upstream stream (issue 22): while the relay cannot write a turn's stream events (Redis refuses
 * writes: `CLIENT PAUSE … WRITE` on the test's private Redis), the service stops reading the upstream body once
 * 1,024 events wait, instead of buffering 4,096 and dropping the rest. A stall shorter than the relay's 2 s pause
 * (700 ms: under the 1 s after which the service counts Redis as down, src/redis/health.ts, and fails writes fast)
 * loses no delta; a longer one resumes the stream (deltas past the bound are dropped for live readers) and the turn
 * still completes with its whole reply. The fake streams 6,000 deltas as fast as the socket takes them.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { text } from '../fake/script.js';
import { parseExposition, value } from '../helpers/prometheus.js';

const DELTAS = 6000;
/** 3 words per delta (the fake's chunking): DELTAS text deltas. */
const BODY = 'w '.repeat(DELTAS * 3);

describe('stream backpressure', { timeout: 120_000 }, () => {
  let h: Harness;
  let r: Redis;
  let pauseMs = 0;
  before(async () => {
    h = await startHarness();
    r = new Redis(h.redis.url);
    h.fake.setHandler(async () => {
      // Writes refused from now on for pauseMs, once per test (a retried request is not paused again); the stream
      // starts at once.
      const pause = pauseMs;
      pauseMs = 0;
      if (pause > 0) await r.call('CLIENT', 'PAUSE', String(pause), 'WRITE');
      return text(BODY);
    });
  });
  after(async () => {
    r.disconnect();
    await h?.close();
  });

  /** The text deltas of the session's event log. */
  async function deltas(id: string): Promise<number> {
    let n = 0;
    let cursor = '0';
    for (let guard = 0; guard < 100; guard++) {
      const page = (await h.api.get(`/v1/sessions/${id}/events?after=${cursor}&limit=1000`)).body;
      for (const ev of page.data)
        if (ev.type === 'stream.event' && ev.data.event.type === 'content_block_delta') n++;
      if (!page.has_more) break;
      cursor = page.next_cursor;
    }
    return n;
  }

  async function runOnce(pause: number) {
    pauseMs = pause;
    const created = await h.api.post('/v1/sessions', { input: 'a long answer, please', stream: true });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const done = await h.api.waitStatus(created.body.id, ['idle', 'failed'], 60_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const history = (await h.api.get(`/v1/sessions/${created.body.id}/messages`)).body.data;
    assert.equal(history.at(-1).content[0].text, BODY, 'the whole reply is in the history');
    return deltas(created.body.id);
  }

  /** `trs_live_events_dropped_total{reason="buffer_full"}` (0 before the first drop). */
  const droppedAtBound = async () =>
    value(
      parseExposition(await (await fetch(`${h.service.url}/metrics`)).text()),
      'trs_live_events_dropped_total',
      { reason: 'buffer_full' },
    ) ?? 0;

  it('a stall shorter than the pause loses no delta: the upstream waits', async () => {
    assert.equal(await runOnce(700), DELTAS);
    assert.equal(await droppedAtBound(), 0);
  });

  it('a longer stall resumes the stream after the pause and the turn completes', async () => {
    const n = await runOnce(4000);
    assert.ok(n > 0 && n <= DELTAS, `${n} deltas`);
    // What live clients missed is counted: every delta not in the log was dropped at the relay's bound.
    assert.ok(
      (await droppedAtBound()) >= DELTAS - n,
      `${await droppedAtBound()} dropped, ${DELTAS - n} missing`,
    );
  });
});
