import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { largeHistorySuite } from '../helpers/large-history.js';
import { text } from '../fake/script.js';

/**
 * A compaction moves the whole history into a kept segment. Built in one script (two whole-list LRANGEs, the segment
 * concatenated and RPUSHed, the rest copied back) a history of megabytes held Redis for seconds (29.7 MB: 4.5 s), and
 * every tenant got 503. A segment over 1 MiB is built by the store and APPENDed in parts of at most 256 KiB with an
 * expiry; the compaction's write keeps that key and pushes a stub naming it, and trims the history in place. Readers
 * see the segment as before; the session's delete drops its key.
 */

const KB = 1024;
const MESSAGE_BYTES = 500 * KB;
const TURNS = 4;

describe('a compaction of a large history', () => {
  const suite = largeHistorySuite();

  it('is staged in bounded parts, reads back exactly, and goes with the session', async () => {
    const { h, redis } = suite;
    const id = await suite.sessionWithTurns(
      Array.from({ length: TURNS }, (_, n) => `#${n} ${'é'.repeat(MESSAGE_BYTES / 2)}`),
    );
    const source = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.equal(source.length, 2 * TURNS);
    const stored = await redis.lrange(`s:{${id}}:m`, 0, -1);

    const monitor = await suite.monitor();
    const r = await h.api.post(`/v1/sessions/${id}/compact`, {});
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const done = await h.api.waitFor(
      id,
      (s) => s.status === 'idle' && !s.compaction_pending && s.compactions === 1,
    );
    await monitor.settle();

    // No command the service sent, nor any a script ran, carries the segment: at most a part (or a message).
    const mine = (args: string[]) => args.some((a) => a.includes(`{${id}}`));
    const size = (args: string[]) => args.reduce((n, a) => n + Buffer.byteLength(a), 0);
    const largest = Math.max(...monitor.commands.filter(mine).map(size));
    assert.ok(largest < 2 * MESSAGE_BYTES, `the largest command about the session: ${largest} bytes`);
    const scripted = Math.max(0, ...monitor.scripted.map(size));
    const big = monitor.scripted.find((a) => size(a) === scripted);
    assert.ok(
      scripted < 2 * MESSAGE_BYTES,
      `the largest command a script ran: ${scripted} bytes: ${big?.map((a) => a.slice(0, 60)).join(' ')}`,
    );
    const parts = monitor.commands.filter((a) => /^append$/i.test(a[0]!) && a[1]!.includes(':cs:'));
    assert.ok(parts.length >= 8, `staged in ${parts.length} parts`);
    const reads = monitor.scripted.filter((a) => /^lrange$/i.test(a[0]!) && a[1] === `s:{${id}}:m`);
    assert.deepEqual(reads, [], 'no script reads the history');

    // The history is the summary; the segment holds every message as it was, byte for byte.
    const after = (await h.api.get(`/v1/sessions/${id}/messages?include=compacted`)).body;
    assert.equal(after.data.length, 1);
    assert.equal(after.data[0].content[0].type, 'compaction');
    assert.equal(after.compacted.length, 1);
    assert.deepEqual(after.compacted[0].messages, source);
    const n = after.compacted[0].at_iteration as number;
    const record = (await h.api.get(`/v1/sessions/${id}/iterations/${n}`)).body;
    assert.equal(record.kind, 'compaction');
    const [stub] = await redis.lrange(`s:{${id}}:c`, 0, -1);
    const m = /^\{"at_iteration":(\d+),"key":"([\w-]+)","bytes":(\d+)\}$/.exec(stub!);
    assert.ok(m, `a stub: ${stub!.slice(0, 80)}`);
    const segKey = `s:{${id}}:cs:${m[2]}`;
    const segment = await redis.getBuffer(segKey);
    assert.ok(segment);
    assert.equal(segment.toString('utf8'), `{"at_iteration":${n},"messages":[${stored.join(',')}]}`);
    assert.equal(segment.length, Number(m[3]));
    assert.equal(await redis.pttl(segKey), -1, 'kept with no expiry');
    const meta = await redis.hmget(`s:{${id}}`, 'seg_bytes', 'msg_base', 'seg_keys');
    assert.equal(meta[0], `1 ${segment.length},${n},a`);
    assert.equal(meta[1], String(2 * TURNS));
    assert.equal(meta[2], m[2]);
    assert.equal(done.message_count, 1);

    // A chat page reads the segment through its stub: by the length the meta hash keeps (segmentAt), and, with none
    // kept (an older version's segment), weighed by Redis (segmentIfFits), which answers the stub when it fits.
    const page = await h.api.get(`/v1/chat/${id}/messages`);
    assert.equal(page.status, 200, JSON.stringify(page.body).slice(0, 300));
    const texts = (page.body as Array<{ role: string; parts: Array<{ type: string; text?: string }> }>).map(
      (u) => u.parts.flatMap((p) => (p.type === 'text' ? [p.text!.slice(0, 3)] : [])).join(''),
    );
    assert.deepEqual(texts, ['#0 ', 'Not', '#1 ', 'Not', '#2 ', 'Not', '#3 ', 'Not']);
    const fits = readFileSync(new URL('../../src/store/lua/segment-if-fits-1.lua', import.meta.url), 'utf8');
    const weigh = (most: number, after = -1) => redis.eval(fits, 1, `s:{${id}}:c`, 0, most, after);
    assert.equal(await weigh(segment.length - 1), segment.length, 'a stub is weighed by the length it names');
    assert.equal(await weigh(segment.length), stub, 'and answered as it is when that fits');
    assert.equal(await weigh(segment.length, n), -1, 'its record read as a segment’s is');
    await redis.hdel(`s:{${id}}`, 'seg_bytes');
    assert.deepEqual((await h.api.get(`/v1/chat/${id}/messages`)).body, page.body);
    await redis.hset(`s:{${id}}`, 'seg_bytes', meta[0]!);

    // The session goes on from the summary, and a second (small) compaction keeps its segment in the list.
    h.fake.enqueue(text('Onwards.'));
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And now?' })).status, 202);
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === TURNS + 1);
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`, {})).status, 202);
    await h.api.waitFor(id, (s) => s.status === 'idle' && !s.compaction_pending && s.compactions === 2);
    const twice = (await h.api.get(`/v1/sessions/${id}/messages?include=compacted`)).body;
    assert.equal(twice.compacted.length, 2);
    assert.deepEqual(twice.compacted[0].messages, source);
    assert.equal(twice.compacted[1].messages.length, 3);
    assert.match((await redis.lindex(`s:{${id}}:c`, 1))!, /^\{"at_iteration":\d+,"messages":\[/);

    // The delete drops the segment's key too.
    assert.equal((await h.api.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal(await redis.exists(segKey), 0);
    assert.deepEqual(await redis.keys(`s:{${id}}:cs:*`), []);
  });
});
