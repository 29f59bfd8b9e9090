/**
 * A run's live news through a short Redis outage (src/engine/live-news.ts): `turn.started`, the stream's deltas and a
 * tool turn's `turn.completed` / `tool.started` (written ahead of the commit that stores the turn) reach the event
 * log once each, in order, though their writes fail while Redis is paused (`CLIENT PAUSE … ALL`: a command sent
 * before the health probe notices times out and runs later; one sent after is refused unsent). Before, a failed
 * write's events were dropped: live clients missed the start of a turn, deltas, or a turn's end.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { reply, text, textBlock, toolUse } from '../fake/script.js';
import { until } from './chaos-lib.js';
import { parseExposition, value } from '../helpers/prometheus.js';

/** Numbered words, 3 to a delta (the fake's chunking): the log's deltas, joined, must be this text, once, in order. */
const BODY = Array.from({ length: 600 }, (_, i) => `w${i}`).join(' ');

interface LoggedEvent {
  id: string;
  type: string;
  data: any;
}

describe('live news through a Redis outage', { timeout: 120_000 }, () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    // A lease that outlives the pauses: the run keeps its turn (a lost lease would send the turn again, a stream
    // the log then holds twice, rightly).
    h = await startHarness({ env: { LEASE_TTL_MS: '15000' } });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r.disconnect();
    await h?.close();
  });

  /** Nothing was given up: `trs_live_events_dropped_total` has no sample above 0. */
  async function noneDropped(): Promise<void> {
    const samples = parseExposition(await (await fetch(`${h.service.url}/metrics`)).text());
    for (const reason of ['buffer_full', 'outage'])
      assert.equal(value(samples, 'trs_live_events_dropped_total', { reason }) ?? 0, 0, reason);
  }

  async function log(id: string): Promise<LoggedEvent[]> {
    const all: LoggedEvent[] = [];
    let cursor = '0';
    for (let guard = 0; guard < 100; guard++) {
      const page = (await h.api.get(`/v1/sessions/${id}/events?after=${cursor}&limit=1000`)).body;
      all.push(...page.data);
      if (!page.has_more) break;
      cursor = page.next_cursor;
    }
    return all;
  }

  const streamedText = (events: LoggedEvent[]) =>
    events
      .filter((e) => e.type === 'stream.event' && e.data.event.type === 'content_block_delta')
      .map((e) => e.data.event.delta.text ?? '')
      .join('');

  /** Redis answers nothing for `ms`, from now (the service's health probe calls it down after ~1 s). */
  const pause = (ms: number) => r.call('CLIENT', 'PAUSE', String(ms), 'ALL');

  /** Resolves once the service counts Redis as down: its commands are refused unsent from then on. */
  const down = () =>
    until(async () => (await fetch(`${h.service.url}/readyz`)).status === 503, 5000, '/readyz 503');

  it('a turn streamed through a pause: every delta once, in order, between turn.started and turn.completed', async () => {
    let paused = false;
    h.fake.setHandler(async () => {
      // The first request only: its stream (200 deltas, 25 ms apart: 5 s) starts as Redis stops answering and
      // outlasts the pause: the first writes time out (and run later), the next are refused unsent while the probe
      // says down, then all go through again.
      if (!paused) {
        paused = true;
        await pause(3500);
      }
      return text(BODY, { eventDelayMs: 25 });
    });
    try {
      const created = await h.api.post('/v1/sessions', { input: 'count, please', stream: true });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const done = await h.api.waitStatus(created.body.id, ['idle', 'failed'], 60_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      const events = await log(created.body.id);
      assert.equal(streamedText(events), BODY, 'the deltas, once each, in order');
      const types = events.map((e) => e.type);
      assert.equal(types.filter((t) => t === 'turn.started').length, 1);
      assert.equal(types.filter((t) => t === 'turn.completed').length, 1);
      assert.ok(types.indexOf('turn.started') < types.indexOf('stream.event'));
      assert.ok(types.lastIndexOf('stream.event') < types.indexOf('turn.completed'));
      await noneDropped();
    } finally {
      h.fake.setHandler(null);
    }
  });

  it("a tool turn ended while Redis is down: its turn.completed and tool.started once, before the tool's result", async () => {
    let calls = 0;
    h.fake.setHandler(async () => {
      calls++;
      if (calls > 1) return text('The sum is 5.');
      // The turn's writes (its stream, its end, the tool's start) all come once the service counts Redis as down
      // (its probe says so after ~1 s; the pause leaves a loaded machine room to see it).
      await pause(4500);
      await down();
      return reply([textBlock('Adding.'), toolUse('calculate_sum', { a: 2, b: 3 })]);
    });
    try {
      const created = await h.api.post('/v1/sessions', {
        input: '2 + 3?',
        tools: ['calculate_sum'],
        stream: true,
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const done = await h.api.waitStatus(created.body.id, ['idle', 'failed'], 60_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      const types = (await log(created.body.id)).map((e) => e.type);
      const count = (t: string) => types.filter((x) => x === t).length;
      assert.equal(count('turn.started'), 2, types.join(' '));
      assert.equal(count('turn.completed'), 2, types.join(' '));
      assert.equal(count('tool.started'), 1, types.join(' '));
      assert.equal(count('tool.completed'), 1, types.join(' '));
      const order = ['turn.started', 'turn.completed', 'tool.started', 'tool.completed'].map((t) =>
        types.indexOf(t),
      );
      assert.deepEqual(
        order,
        [...order].sort((a, b) => a - b),
        types.join(' '),
      );
      assert.ok(types.lastIndexOf('turn.started') > types.indexOf('tool.completed'), types.join(' '));
      await noneDropped();
    } finally {
      h.fake.setHandler(null);
    }
  });
});
