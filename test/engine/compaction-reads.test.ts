import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startReplyMeter, type ReplyMeter } from '../helpers/redis-reply-meter.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { text } from '../fake/script.js';

/**
 * The reads of a session's kept segments come from Redis in bounded pieces. Read with one LRANGE of the whole
 * `compacted` list (and one GET of each segment kept in a key of its own), a session's segments came back in one
 * reply of as many megabytes as they hold, queuing every tenant's commands behind it on the service's connection
 * (and a reply of seconds made the health guard answer 503 to all). `?include=compacted`, `GET …/iterations/:n` of a
 * reply inside a segment, a fork at an iteration inside one and a chat page are answered as before, byte for byte,
 * from pages of the list and pieces of the segments: no reply Redis sends for them is over MOST_REPLY_BYTES (measured
 * by a proxy that weighs each reply), here where the segments hold 6 MiB. Likewise for a large segment an older
 * version kept in the list itself (no key of its own): it is read in parts. A read of one reply, or a fork, reads
 * only the segment that holds it, told by the message counts kept with the segments (meta `seg_counts`), not every
 * segment before it; a session with no counts (an older version's) is read as before.
 */

const KB = 1024;
const MiB = 1024 * KB;
/** The store's page of the list is at most 2 MiB of segments (a part of one, 1 MiB); RESP framing besides. */
const MOST_REPLY_BYTES = 2 * MiB + 16 * KB;
/** A user message of about this many bytes ('é' is two bytes in UTF-8, and JSON keeps it so). */
const MESSAGE_BYTES = 900 * KB;

describe('reads of large compacted segments', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let meter: ReplyMeter;
  let h: Harness;
  let r: Redis;
  before(async () => {
    redis = await startTestRedis({ appendonly: false });
    meter = await startReplyMeter(redis.port);
    h = await startHarness({ redis: { ...redis, url: meter.url } });
    r = new Redis(redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
    await meter?.close();
    await redis?.stop();
  });

  /** The reads that got a Redis reply over the bound, and the largest reply with its command. */
  const over: string[] = [];
  /** The bytes Redis sent for each read, last time it was made. */
  const replied = new Map<string, number>();
  async function measured<T>(what: string, made: () => Promise<T>): Promise<T> {
    meter.reset();
    const res = await made();
    const top = meter.largest();
    if (top.bytes > MOST_REPLY_BYTES) over.push(`${what}: ${top.bytes} bytes, to ${top.command}`);
    replied.set(what, meter.total());
    return res;
  }

  /** The raw text of a GET (the answer's bytes), asserting 200. */
  async function read(path: string, what: string): Promise<string> {
    return measured(what, async () => {
      const res = await fetch(h.api.base + path);
      const body = await res.text();
      assert.equal(res.status, 200, `${what}: ${body.slice(0, 300)}`);
      return body;
    });
  }

  async function turn(id: string, message: string, n: number): Promise<void> {
    h.fake.enqueue(text(`Noted ${n}.`));
    const res = await h.api.post(`/v1/sessions/${id}/messages`, { text: message });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === n, 30_000);
  }

  async function compact(id: string, count: number): Promise<void> {
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`, {})).status, 202);
    await h.api.waitFor(
      id,
      (s) => s.status === 'idle' && !s.compaction_pending && s.compactions === count,
      30_000,
    );
  }

  const big = (n: number) => `#${n} ${'é'.repeat(MESSAGE_BYTES / 2)}`;
  const history = async (id: string) =>
    (await h.api.get(`/v1/sessions/${id}/messages`)).body.data as unknown[];

  it('answer as before, and no Redis reply is over the bound', async () => {
    const created = await h.api.post('/v1/sessions', { start: false, stream: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    // Segment 0: four turns of 900 KiB, 3.6 MB, kept in a key of its own (records 1–4, the compaction 5).
    for (let n = 1; n <= 4; n++) await turn(id, big(n), n);
    const sources = [await history(id)];
    await compact(id, 1);
    // Segments 1–3: a summary, a 900 KiB message and its answer each, kept in the list (records 6, 8, 10: turns; 7,
    // 9, 11: compactions): 2.7 MB in the list.
    for (let k = 1; k <= 3; k++) {
      await turn(id, big(4 + k), 4 + k);
      sources.push(await history(id));
      await compact(id, 1 + k);
    }
    assert.match((await r.lindex(`s:{${id}}:c`, 0))!, /^\{"at_iteration":5,"key":"[\w-]+","bytes":\d+\}$/);
    for (let k = 1; k <= 3; k++) assert.match((await r.lindex(`s:{${id}}:c`, k))!, /^\{"at_iteration":/);

    const answers = async () => {
      const all = await read(`/v1/sessions/${id}/messages?include=compacted`, '?include=compacted');
      const first = await read(`/v1/sessions/${id}/iterations/1`, 'a reply in segment 0');
      const sixth = await read(`/v1/sessions/${id}/iterations/6`, 'a reply in segment 1');
      const chat = await read(`/v1/chat/${id}/messages`, 'the chat page');
      const forked = await measured('a fork in segment 0', () =>
        h.api.post(`/v1/sessions/${id}/fork`, { at_iteration: 2 }),
      );
      assert.equal(forked.status, 201, JSON.stringify(forked.body));
      const inOne = await measured('a fork in segment 2', () =>
        h.api.post(`/v1/sessions/${id}/fork`, { at_iteration: 8 }),
      );
      assert.equal(inOne.status, 201, JSON.stringify(inOne.body));
      return {
        all,
        first,
        sixth,
        chat,
        forked: await history(forked.body.id as string),
        inOne: await history(inOne.body.id as string),
      };
    };
    /** Bytes of segment `k` as kept (segment 0 in a key of its own, the others in the list). */
    const segmentBytes = async (k: number) => {
      const stored = (await r.lindexBuffer(`s:{${id}}:c`, k))!;
      const key = /"key":"([\w-]+)"/.exec(stored.toString('utf8'))?.[1];
      return key ? r.strlen(`s:{${id}}:cs:${key}`) : stored.length;
    };
    const sizes = await Promise.all([0, 1, 2, 3].map(segmentBytes));

    const kept = await answers();
    const all = JSON.parse(kept.all);
    assert.deepEqual(
      all.compacted.map((s: { at_iteration: number }) => s.at_iteration),
      [5, 7, 9, 11],
    );
    assert.deepEqual(
      all.compacted.map((s: { messages: unknown[] }) => s.messages),
      sources,
    );
    assert.deepEqual(JSON.parse(kept.first).reply, sources[0]![1]);
    assert.deepEqual(JSON.parse(kept.sixth).reply, sources[1]![2]);
    assert.deepEqual(kept.forked, sources[0]!.slice(0, 4));
    // Record 8 (the turn after the second compaction) ends segment 2: the fork starts from its summary.
    assert.deepEqual(kept.inOne, sources[2]);
    assert.equal(JSON.parse(kept.chat).length, 14, 'the chat page shows every turn');
    // A read of one reply, or a fork, reads the segment that holds it and no other: where each segment's messages
    // start is kept with it (meta `seg_counts`). Walking from the first, a reply in segment 1 read the 3.6 MB of
    // segment 0 first, and a page of the list brought the segment after the one wanted.
    const others = 128 * KB; // the meta hash, the record, the fork's writes: what else Redis answers meanwhile
    assert.ok(sizes[0]! > 3 * MiB && sizes[1]! < MiB && sizes[2]! < MiB, JSON.stringify(sizes));
    assert.ok(replied.get('a reply in segment 1')! < sizes[1]! + others, JSON.stringify([...replied]));
    assert.ok(replied.get('a fork in segment 2')! < sizes[2]! + others, JSON.stringify([...replied]));
    assert.ok(replied.get('a reply in segment 0')! < sizes[0]! + others, JSON.stringify([...replied]));

    // The first segment as an older version kept it: in the list itself, 3.6 MB in one element.
    const [stub] = await r.lrange(`s:{${id}}:c`, 0, 0);
    const suffix = /"key":"([\w-]+)"/.exec(stub!)![1]!;
    const segment = (await r.getBuffer(`s:{${id}}:cs:${suffix}`))!;
    assert.ok(segment.length > 3 * MiB);
    await r.lset(`s:{${id}}:c`, 0, segment);
    // Nor did it count the segments' messages: the reads walk the segments from the first, as they did.
    await r.hdel(`s:{${id}}`, 'seg_keys', 'seg_counts');
    await r.del(`s:{${id}}:cs:${suffix}`);
    const legacy = await answers();
    assert.ok(replied.get('a reply in segment 1')! > sizes[0]!, 'segment 0 read on the way');
    assert.equal(legacy.all, kept.all);
    assert.equal(legacy.first, kept.first);
    assert.equal(legacy.sixth, kept.sixth);
    assert.equal(legacy.chat, kept.chat);
    assert.deepEqual(legacy.forked, kept.forked);
    assert.deepEqual(legacy.inOne, kept.inOne);
    // And with no length kept for it (nor for the others), the chat page weighs each in Redis before it reads it.
    await r.hdel(`s:{${id}}`, 'seg_bytes');
    assert.equal(await read(`/v1/chat/${id}/messages`, 'the chat page, weighing'), kept.chat);
    assert.deepEqual(over, [], 'no Redis reply over the bound');
  });
});
