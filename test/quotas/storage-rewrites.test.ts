/**
 * TENANT_MAX_BYTES counts what a write rewrites, not only what it appends: a PATCH's `metadata`, a stored step's
 * results (its `result:*` fields, the `pending` step), an approval's edited input (the history's last message) add
 * their growth (new length less old) to the tenant's count, and a session's delete gives it all back. A client's
 * PATCH whose growth would take the tenant past its limit is refused with 429 `storage_bytes` and writes nothing;
 * one that shrinks it passes.
 *
 * Exact: each write's count is compared with what Redis holds after it — the growth of every meta field a script did
 * not keep for itself, of the history, and the data of the events it logged (ASCII, so characters are bytes).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { reply, text, toolUse } from '../fake/script.js';
import { startHarness, type Api, type ApiResponse, type Harness } from '../helpers/service.js';
import { storageKey } from '../../src/store/storage-quota.js';
import { sessionKeys } from '../../src/store/keys.js';
import { BOOKKEEPING_FIELDS } from '../helpers/session-fields.js';
import { untilKeyspace } from '../helpers/keyspace-wait.js';

const MAX = 10_000_000;
/** Metadata of `keys` values of 500 `ch` (values hold at most 512 characters, 32 keys at most). */
const metadataOf = (ch: string, keys: number) =>
  Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, ch.repeat(500)]));
const LOOKUP = { name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } };

describe('TENANT_MAX_BYTES counts the growth of what a write rewrites', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a,full:key-f', TENANT_MAX_BYTES: String(MAX) } });
    a = h.api.as('key-a');
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r.disconnect();
    await h?.close();
  });

  const used = async (tenant = 'acme') => Number((await r.get(storageKey(tenant))) ?? 0);

  /**
   * acme's count once it holds all of session `id`'s `bytes` over `start` (its count before the session was made, when
   * no other session of acme's is left): a run's commit adds its bytes to the tenant's counter after the session's
   * script that shows its status (one INCRBY, batched: src/store/storage-quota.ts), so a client that saw the status may
   * read the counter before. Read again at each write of the counter (a keyspace notification), for at most 20 s.
   */
  async function settled(id: string, start: number): Promise<number> {
    let count = 0;
    await untilKeyspace(
      h.redis.url,
      r,
      storageKey('acme'),
      async () => {
        const [now, bytes] = await Promise.all([used(), r.hget(sessionKeys(id).meta, 'bytes')]);
        count = now;
        return now - start === Number(bytes) ? null : `${now - start} counted, the session holds ${bytes}`;
      },
      20_000,
      'K$',
    );
    return count;
  }

  /** What Redis holds of a session that a write may change: its fields, its history, its last event id. */
  async function snapshot(id: string) {
    const k = sessionKeys(id);
    const [fields, msgs, last] = await Promise.all([
      r.hgetall(k.meta),
      r.lrange(k.msgs, 0, -1),
      r.xrevrange(k.events, '+', '-', 'COUNT', 1),
    ]);
    return { fields, msgs, lastEvent: last[0]?.[0] ?? '0-0' };
  }
  type Snapshot = Awaited<ReturnType<typeof snapshot>>;

  /**
   * The bytes a write between `before` and now stored: the growth of each field (but bookkeeping) and of each history
   * message (one rewritten in place, none appended here), and the data of the events it logged.
   */
  async function stored(
    id: string,
    before: Snapshot,
  ): Promise<{ total: number; fields: number; msgs: number }> {
    const now = await snapshot(id);
    let fields = 0;
    for (const f of new Set([...Object.keys(before.fields), ...Object.keys(now.fields)])) {
      if (BOOKKEEPING_FIELDS.has(f)) continue;
      fields += (now.fields[f] ?? '').length - (before.fields[f] ?? '').length;
    }
    assert.equal(now.msgs.length, before.msgs.length, 'no message appended');
    let msgs = 0;
    for (let i = 0; i < now.msgs.length; i++) msgs += now.msgs[i]!.length - before.msgs[i]!.length;
    const events = await r.xrange(sessionKeys(id).events, `(${before.lastEvent}`, '+');
    let logged = 0;
    for (const [, kv] of events) logged += kv[kv.indexOf('d') + 1]!.length;
    assert.ok(events.length > 0, 'the write logged its events');
    return { total: fields + msgs + logged, fields, msgs };
  }

  const ok = (res: ApiResponse, what: string) =>
    assert.ok([200, 201, 202].includes(res.status), `${what}: ${res.status} ${JSON.stringify(res.body)}`);

  async function deleted(id: string, before: number, tenant = 'acme', api = a): Promise<void> {
    ok(await api.req('DELETE', `/v1/sessions/${id}`), 'the delete');
    assert.equal(await used(tenant), before, "the delete gives back all the session's bytes");
  }

  it("a PATCH's metadata: its growth counted, given back when it shrinks and at the delete", async () => {
    const start = await used();
    const made = await a.post('/v1/sessions', { input: 'Hi.', start: false, metadata: { note: 'a' } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.id as string;

    let before = await snapshot(id);
    let count = await used();
    ok(await a.req('PATCH', `/v1/sessions/${id}`, { metadata: metadataOf('m', 32) }), 'a growing PATCH');
    let wrote = await stored(id, before);
    assert.ok(wrote.fields >= 15_000, `metadata grew by ${wrote.fields}`);
    assert.equal((await used()) - count, wrote.total, 'the count rose by the growth and the event');

    before = await snapshot(id);
    count = await used();
    ok(await a.req('PATCH', `/v1/sessions/${id}`, { metadata: { note: 'b' } }), 'a shrinking PATCH');
    wrote = await stored(id, before);
    assert.ok(wrote.fields <= -15_000, `metadata shrank by ${-wrote.fields}`);
    assert.equal((await used()) - count, wrote.total, 'the shrink given back, the event counted');

    await deleted(id, start);
  });

  it("a stored step's results and an edited input: their growth counted, all given back at the delete", async () => {
    const start = await used();
    // Two client calls: one result leaves the step waiting for the other, so no run writes meanwhile.
    h.fake.enqueue(
      reply([toolUse('lookup', { q: 'one' }, 'toolu_r1'), toolUse('lookup', { q: 'two' }, 'toolu_r2')]),
    );
    const made = await a.post('/v1/sessions', { input: 'Look both up.', tools: [LOOKUP] });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.id as string;
    assert.equal((await a.waitStatus(id, ['requires_action', 'idle', 'failed'])).status, 'requires_action');

    const before = await snapshot(id);
    const count = await settled(id, start);
    const content = 'r'.repeat(30_000);
    ok(await a.req('PUT', `/v1/sessions/${id}/tool-results/toolu_r1`, { content }), 'a result');
    const wrote = await stored(id, before);
    assert.ok(wrote.fields >= content.length, `the step's fields grew by ${wrote.fields}`);
    assert.equal((await used()) - count, wrote.total, "the count rose by the result's field and its events");

    // The last result: the run goes on, the results move into the history, the session ends idle.
    h.fake.enqueue(text('Both found.'));
    ok(await a.req('PUT', `/v1/sessions/${id}/tool-results/toolu_r2`, { content: 'two' }), 'the last result');
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    // The step's fields were given back as they were dropped; the results turn they became is counted instead: the
    // count still covers the history and the log the session keeps.
    const history = await r.lrange(sessionKeys(id).msgs, 0, -1);
    assert.ok(
      history.some((m) => m.includes(content)),
      'the results turn holds the result',
    );
    const log = await r.xrange(sessionKeys(id).events, '-', '+');
    const kept =
      history.reduce((n, m) => n + m.length, 0) +
      log.reduce((n, [, kv]) => n + kv[kv.indexOf('d') + 1]!.length, 0);
    const held = (await settled(id, start)) - start;
    assert.ok(held >= kept, `${held} bytes counted, ${kept} kept`);
    await deleted(id, start);

    // An approval with an edited input, the step's other call still waiting for its decision.
    const calls = ['toolu_e1', 'toolu_e2'];
    h.fake.enqueue(reply(calls.map((c, i) => toolUse('evaluate_expression', { expression: `${i} + 1` }, c))));
    const waiting = await a.post('/v1/sessions', {
      input: 'The weather?',
      tools: ['evaluate_expression'],
      approval: ['evaluate_expression'],
    });
    assert.equal(waiting.status, 201, JSON.stringify(waiting.body));
    const wid = waiting.body.id as string;
    assert.equal((await a.waitStatus(wid, ['requires_action', 'idle', 'failed'])).status, 'requires_action');
    const ready = await snapshot(wid);
    const counted = await settled(wid, start);
    const expression = '1+'.repeat(12_500) + '1';
    const decided = await a.post(`/v1/sessions/${wid}/tool-calls/toolu_e1`, {
      decision: 'approve',
      input: { expression },
    });
    ok(decided, 'an approval with an edited input');
    assert.equal(decided.body.status, 'requires_action');
    const edited = await stored(wid, ready);
    assert.ok(edited.msgs >= expression.length - 10, `the history's call grew by ${edited.msgs}`);
    assert.ok(edited.fields >= expression.length - 10, `the stored step grew by ${edited.fields}`);
    assert.equal((await used()) - counted, edited.total, 'the count rose by both and the events');
    await deleted(wid, start);
  });

  it("a client's PATCH whose growth passes the limit is 429 storage_bytes and writes nothing; a shrink passes", async () => {
    const f = h.api.as('key-f');
    const made = await f.post('/v1/sessions', {
      input: 'Hi.',
      start: false,
      metadata: metadataOf('n', 16),
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.id as string;

    // Room for the PATCH's event (its body: `session.updated`), not for the field's growth as well.
    const grow = { metadata: metadataOf('g', 32) };
    const event = JSON.stringify(grow).length;
    const room = event + 4000;
    await r.set(storageKey('full'), MAX - room);
    const before = await snapshot(id);
    const refused = await f.req('PATCH', `/v1/sessions/${id}`, grow);
    assert.equal(refused.status, 429, JSON.stringify(refused.body).slice(0, 300));
    assert.deepEqual(refused.body.error.details, { quota: 'storage_bytes', limit: MAX });
    const after = await snapshot(id);
    assert.deepEqual(after, before, 'nothing written');
    assert.equal(await used('full'), MAX - room);

    // A PATCH that shrinks the field passes: its event counted, the shrink given back.
    const shrink = { metadata: { note: 's' } };
    ok(await f.req('PATCH', `/v1/sessions/${id}`, shrink), 'a shrinking PATCH');
    const wrote = await stored(id, before);
    assert.ok(wrote.fields < -7000, `metadata shrank by ${-wrote.fields}`);
    assert.equal(await used('full'), MAX - room + wrote.total);

    // The count was set by hand: the delete gives back what the session's writes counted, its create's and its own.
    await deleted(id, MAX - room - Number(before.fields['bytes']), 'full', f);
  });
});
