/**
 * TENANT_MAX_BYTES counts UTF-8 bytes, what Redis stores, wherever a write is charged: a session whose content is
 * CJK or emoji (3 and 4 bytes a character, 1 and 2 UTF-16 units) is charged its bytes at its create, at each write of
 * its run (messages, iteration records, events) and for what a PATCH rewrites; a create that would fit counted in
 * UTF-16 units but not in bytes is refused; and a session's delete gives back exactly what it was charged.
 *
 * Each write's count is compared with the UTF-8 bytes Redis holds after it (every meta field but the scripts'
 * bookkeeping, the history and records, the data of the events logged), within a slack that does not grow with the
 * content (`charged`); the content is chosen so that a count in UTF-16 units falls short of it by far more. A run's
 * stream deltas are counted only when its commit carries them (not when the relay wrote them first), so a run's count
 * lies between what Redis holds without them and with them.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { text } from '../fake/script.js';
import { startHarness, type Api, type ApiResponse, type Harness } from '../helpers/service.js';
import { storageKey } from '../../src/store/storage-quota.js';
import { sessionKeys } from '../../src/store/keys.js';
import { BOOKKEEPING_FIELDS } from '../helpers/session-fields.js';

const MAX = 300_000;
/** 3 bytes and 1 UTF-16 unit each. */
const KANJI = '漢字';
/** 4 bytes and 2 UTF-16 units. */
const EMOJI = '😀';
const bytes = (s: string) => Buffer.byteLength(s);
/** What `charged`'s comparison allows (bytes the count and `stored` may differ by whatever the content). */
const SLACK = 256;
/** Bytes of the create's input, at least, that a count in UTF-16 units misses. */
const CONTENT_MISSED = 8 * SLACK;

describe('TENANT_MAX_BYTES counts UTF-8 bytes', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let t: Api;
  let r: Redis;
  /** Subscribed to the keyspace notifications of acme's counter (`settled`). */
  let sub: Redis;
  const counterWrites = new Set<() => void>();
  before(async () => {
    h = await startHarness({
      env: { API_KEYS: 'acme:key-a,tight:key-t', TENANT_MAX_BYTES: String(MAX) },
    });
    a = h.api.as('key-a');
    t = h.api.as('key-t');
    r = new Redis(h.redis.url);
    await r.config('SET', 'notify-keyspace-events', 'K$');
    sub = new Redis(h.redis.url);
    sub.on('pmessage', () => {
      for (const wake of counterWrites) wake();
    });
    await sub.psubscribe(`__keyspace@*__:${storageKey('acme')}`);
  });
  after(async () => {
    sub.disconnect();
    r.disconnect();
    await h?.close();
  });

  const used = async (tenant = 'acme') => Number((await r.get(storageKey(tenant))) ?? 0);

  /**
   * UTF-8 bytes Redis holds of session `id` that its writes are charged for (`n`): its meta fields but the scripts'
   * bookkeeping, its history and iteration records, the data of the events it logged; and apart (`stream`), its
   * `stream.event`s, counted when its turn's commit carries them and not when the stream relay wrote them as they came
   * (store.ts `appendEvents`, bounded by EVENT_LOG_MAX_BYTES instead; so is `turn.started`, left out), which of the two
   * depending on timing.
   */
  async function stored(id: string): Promise<{ n: number; stream: number }> {
    const k = sessionKeys(id);
    const [fields, msgs, iters, events] = await Promise.all([
      r.hgetall(k.meta),
      r.lrange(k.msgs, 0, -1),
      r.lrange(k.iters, 0, -1),
      r.xrange(k.events, '-', '+'),
    ]);
    let n = 0;
    let stream = 0;
    for (const [f, v] of Object.entries(fields)) if (!BOOKKEEPING_FIELDS.has(f)) n += bytes(v);
    for (const m of [...msgs, ...iters]) n += bytes(m);
    for (const [, kv] of events) {
      const type = kv[kv.indexOf('t') + 1];
      const data = bytes(kv[kv.indexOf('d') + 1]!);
      if (type === 'stream.event') stream += data;
      else if (type !== 'turn.started') n += data;
    }
    return { n, stream };
  }

  /**
   * acme's count since `start` once it holds session `id`'s `bytes`: the store adds a write's bytes to the tenant's
   * counter after the session's script (one INCRBY, storage-quota.ts), so a client that saw a run's end (its
   * `session.status`, published by the script) may read the counter before. Read again at each write of the counter
   * (a keyspace notification), for at most 10 s.
   */
  async function settled(id: string, start: number): Promise<number> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      let wake!: () => void;
      const written = new Promise<void>((resolve) => counterWrites.add((wake = resolve)));
      const [count, session] = await Promise.all([used(), r.hget(sessionKeys(id).meta, 'bytes')]);
      if (count - start === Number(session) || Date.now() > deadline) {
        counterWrites.delete(wake);
        return count - start;
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        written,
        new Promise((resolve) => (timer = setTimeout(resolve, deadline - Date.now()))),
      ]);
      clearTimeout(timer);
      counterWrites.delete(wake);
    }
  }

  /**
   * The tenant's count since `start` against what `id` stores (`stored`): at least `n`, at most `n` and `stream`,
   * within SLACK. SLACK covers what does not grow with the content: a run's last `session.status`, which the commit's
   * `queue.none` writes uncounted (under 100 bytes); `ev_last`, kept by the scripts (15). A count in UTF-16 units of
   * this content falls short by thousands of bytes (CONTENT_MISSED). The session's `bytes` is its share, exactly.
   */
  async function charged(id: string, start: number, what: string): Promise<number> {
    const count = await settled(id, start);
    assert.equal(Number(await r.hget(sessionKeys(id).meta, 'bytes')), count, `${what}: the session's bytes`);
    const { n, stream } = await stored(id);
    assert.ok(
      count >= n - SLACK && count <= n + stream + SLACK,
      `${what}: charged ${count}, stores ${n} bytes of UTF-8 and ${stream} of stream events`,
    );
    return count;
  }

  const ok = (res: ApiResponse, what: string) =>
    assert.ok([200, 201, 202].includes(res.status), `${what}: ${res.status} ${JSON.stringify(res.body)}`);

  it('a create, a PATCH and a run of CJK and emoji are charged their UTF-8 bytes; the delete gives all back', async () => {
    const start = await used();
    const input = KANJI.repeat(2000) + EMOJI.repeat(1000);
    const note = `絵文字${EMOJI}`.repeat(80);
    assert.ok(bytes(input) - input.length >= CONTENT_MISSED && bytes(note) - note.length > SLACK);
    const made = await a.post('/v1/sessions', { input, start: false, metadata: { note } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.id as string;
    const created = await charged(id, start, 'the create');
    assert.ok(created >= bytes(input) + bytes(note), `the create charged ${created}`);

    // A shrink is weighed in bytes by the script (apply-8.lua): it gives back the note's bytes, no more than charged.
    ok(await a.req('PATCH', `/v1/sessions/${id}`, { metadata: { note: 'b' } }), 'a shrinking PATCH');
    await charged(id, start, 'the shrinking PATCH');

    // A run: the follow-up's message, the reply's message and iteration record, the commit's events (the reply's
    // stream deltas among them).
    h.fake.enqueue(text(KANJI.repeat(3000) + EMOJI.repeat(500)));
    ok(
      await a.post(`/v1/sessions/${id}/messages`, { content: `${KANJI}${EMOJI}`.repeat(500) }),
      'a follow-up',
    );
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    const ran = await charged(id, start, 'the run');
    assert.ok(
      ran - created >= 2 * (KANJI.repeat(3000) + EMOJI.repeat(500)).length,
      `the run charged ${ran - created}`,
    );

    ok(await a.req('DELETE', `/v1/sessions/${id}`), 'the delete');
    assert.equal(await used(), start, "the delete gives back all the session's bytes");
  });

  it('a create that fits in UTF-16 units but not in bytes is refused 429 storage_bytes', async () => {
    assert.equal(await used('tight'), 0);
    // 120 000 ASCII characters (the history's message; its create's events are small) fit under MAX...
    const ascii = await t.post('/v1/sessions', { input: 'a'.repeat(120_000), start: false });
    assert.equal(ascii.status, 201, JSON.stringify(ascii.body).slice(0, 300));
    const counted = await used('tight');
    assert.ok(counted > 120_000 && counted < MAX, `${counted} bytes`);
    ok(await t.req('DELETE', `/v1/sessions/${ascii.body.id}`), 'the delete');
    assert.equal(await used('tight'), 0);

    // ...as many CJK characters, as many UTF-16 units (what the count used to weigh), are three times the bytes, more
    // than MAX: refused, nothing stored.
    const cjk = await t.post('/v1/sessions', { input: '漢'.repeat(120_000), start: false });
    assert.equal(cjk.status, 429, JSON.stringify(cjk.body).slice(0, 300));
    assert.equal(cjk.body.error.code, 'quota_exceeded');
    assert.deepEqual(cjk.body.error.details, { quota: 'storage_bytes', limit: MAX });
    assert.equal(await used('tight'), 0);
    const list = await t.get('/v1/sessions');
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.data, []);
  });
});
