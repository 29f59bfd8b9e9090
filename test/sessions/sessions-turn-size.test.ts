import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { apiError } from '../fake/script.js';
import { checkHistory, type StoredMessage } from '../../src/history.js';

/**
 * Back-to-back follow-ups merged into one user turn (issue 11 item 2, the write side): the event log carries what
 * each merge added, not the whole turn again; the turn has a byte cap (MAX_TURN_BYTES, 413); the log is bounded in
 * bytes (EVENT_LOG_MAX_BYTES), its oldest events trimmed, a cursor before them answered 410.
 *
 * The turn grows as in the probe that found the hole: the upstream refuses every request (400), so each follow-up
 * restarts a run that merges it into the trailing user turn and fails again.
 */

const KB100 = 100 * 1024;
/** A follow-up of `bytes` bytes of text, numbered so the order can be checked. */
const big = (n: number, bytes = KB100) => `#${String(n).padStart(2, '0')} ${'x'.repeat(bytes - 4)}`;

/** Event log entries of a session: type and data as stored. */
async function logOf(redis: Redis, id: string): Promise<Array<{ id: string; t: string; d: string }>> {
  const rows = await redis.xrange(`s:{${id}}:e`, '-', '+');
  return rows.map(([eid, f]) => {
    const m: Record<string, string> = {};
    for (let i = 0; i < f.length; i += 2) m[f[i]!] = f[i + 1]!;
    return { id: eid, t: m['t'] ?? '', d: m['d'] ?? '' };
  });
}

const bytesOf = (log: Array<{ t: string; d: string }>) =>
  log.reduce((n, e) => n + Buffer.byteLength(e.d) + Buffer.byteLength(e.t), 0);

/** Posts follow-ups to a session whose every turn fails; each is merged into the trailing user turn by a run. */
async function postWhileFailing(h: Harness, id: string, from: number, to: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let n = from; n <= to; n++) {
    const before = (await h.api.get(`/v1/sessions/${id}`)).body.revision;
    const r = await h.api.post(`/v1/sessions/${id}/messages`, { text: big(n) });
    statuses.push(r.status);
    if (r.status !== 202) break;
    // The run took the follow-up into the history and failed again.
    await h.api.waitFor(id, (s) => s.status === 'failed' && s.revision > before + 1, 20_000);
  }
  return statuses;
}

async function lastUserTurn(h: Harness, id: string): Promise<{ history: StoredMessage[]; texts: string[] }> {
  const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data as StoredMessage[];
  assert.deepEqual(checkHistory(history), []);
  const last = history.at(-1)!;
  assert.equal(last.role, 'user');
  const blocks = typeof last.content === 'string' ? [{ type: 'text', text: last.content }] : last.content;
  return { history, texts: blocks.map((b) => String(b.text).slice(0, 3)) };
}

describe('a user turn merged from follow-ups: events carry what changed', () => {
  let h: Harness;
  let probe: Redis;
  before(async () => {
    h = await startHarness({ env: { EVENT_LOG_MAX_BYTES: String(64 * 1024 * 1024) } });
    probe = new Redis(h.redis.url);
    h.fake.setHandler(() => apiError(400, 'invalid_request_error'));
  });
  after(async () => {
    probe?.disconnect();
    await h?.close();
  });

  it('20 follow-ups of 100 kB write about 2 x 2 MB of events, not 20 times the growing turn', async (t) => {
    const created = await h.api.post('/v1/sessions', { start: false });
    assert.equal(created.status, 201);
    const id = created.body.id;
    const statuses = await postWhileFailing(h, id, 1, 20);
    assert.deepEqual(statuses, Array(20).fill(202));
    // Every follow-up joined the one user turn, in order.
    const { history, texts } = await lastUserTurn(h, id);
    assert.equal(history.length, 1);
    assert.deepEqual(
      texts,
      Array.from({ length: 20 }, (_, i) => `#${String(i + 1).padStart(2, '0')}`.slice(0, 3)),
    );
    const log = await logOf(probe, id);
    const total = bytesOf(log);
    const posted = 20 * KB100;
    t.diagnostic(`event log: ${total} B of type + data in ${log.length} events for ${posted} B posted`);
    // Each follow-up is in the log twice (message.queued, then message.appended with the blocks it added); the
    // whole turn at each merge would be 20 x 21 / 2 x 100 kB = 21 MB more.
    assert.ok(total < 2.5 * posted, `event log ${total} B for ${posted} B posted`);
    const appended = log.filter((e) => e.t === 'message.appended');
    assert.equal(appended.length, 20);
    for (const [i, e] of appended.entries()) {
      assert.ok(Buffer.byteLength(e.d) < KB100 + 1024, `message.appended #${i + 1}: ${e.d.length} B`);
      const d = JSON.parse(e.d);
      assert.equal(d.index, 0);
      assert.equal(d.into_last, i > 0);
      assert.equal(d.role, 'user');
      assert.equal(d.content.length, 1);
      assert.equal(d.content[0].text, big(i + 1));
    }
    // The byte count the store keeps for trimming matches the log.
    const counted = Number(await probe.hget(`s:{${id}}`, 'ev_bytes'));
    assert.equal(counted, total + 32 * log.length);
  });
});

describe('MAX_TURN_BYTES and EVENT_LOG_MAX_BYTES', () => {
  let h: Harness;
  let probe: Redis;
  const TURN_MAX = 1_000_000;
  const LOG_MAX = 1_500_000;
  before(async () => {
    h = await startHarness({
      env: { MAX_TURN_BYTES: String(TURN_MAX), EVENT_LOG_MAX_BYTES: String(LOG_MAX) },
    });
    probe = new Redis(h.redis.url);
    h.fake.setHandler(() => apiError(400, 'invalid_request_error'));
  });
  after(async () => {
    probe?.disconnect();
    await h?.close();
  });

  it('a follow-up that would take the turn past MAX_TURN_BYTES is refused with 413; the history stays valid', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    const id = created.body.id;
    const firstEvent = (await logOf(probe, id))[0]!.id;
    // 9 blocks of 100 kB (plus their JSON) fit in 1,000,000 bytes; a 10th does not.
    const statuses = await postWhileFailing(h, id, 1, 10);
    assert.deepEqual(statuses, [...Array(9).fill(202), 413]);
    const over = await h.api.post(`/v1/sessions/${id}/messages`, { text: big(10) });
    assert.equal(over.status, 413);
    assert.equal(over.body.error.code, 'payload_too_large');
    assert.equal(over.body.error.details.quota, 'MAX_TURN_BYTES');
    assert.equal(over.body.error.details.limit, TURN_MAX);
    assert.ok(over.body.error.details.turn_bytes > TURN_MAX);
    // Nothing of the refused follow-ups was written; the session is as it was.
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'failed');
    assert.equal(await probe.llen(`s:{${id}}:q`), 0);
    const { texts } = await lastUserTurn(h, id);
    assert.equal(texts.length, 9);
    // A small follow-up still fits; the model answers the whole turn.
    h.fake.setHandler(null);
    const small = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'and now, briefly?' });
    assert.equal(small.status, 202);
    await h.api.waitStatus(id, 'idle', 20_000);
    const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data as StoredMessage[];
    assert.deepEqual(checkHistory(history), []);
    assert.deepEqual(
      history.map((m) => m.role),
      ['user', 'assistant'],
    );

    // The log is bounded in bytes: the oldest events were trimmed, and a cursor before them answers 410.
    const log = await logOf(probe, id);
    assert.ok(bytesOf(log) + 32 * log.length <= LOG_MAX, `log of ${bytesOf(log)} B`);
    assert.ok(log[0]!.id > firstEvent, 'the oldest events were trimmed');
    const expired = await h.api.get(`/v1/sessions/${id}/events?after=${firstEvent}`);
    assert.equal(expired.status, 410);
    assert.equal(expired.body.error.code, 'cursor_expired');
    // A cursor in the kept range still reads on.
    const kept = await h.api.get(`/v1/sessions/${id}/events?after=${log[0]!.id}`);
    assert.equal(kept.status, 200);
    h.fake.setHandler(() => apiError(400, 'invalid_request_error'));
  });
});
