import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { largeHistorySuite } from '../helpers/large-history.js';
import { text } from '../fake/script.js';

/**
 * A fork copies its source's history, whose size only the tenant's storage quota bounds. Copied in one script (the
 * history JSON-encoded in its ops, decoded in Lua) a history of megabytes held Redis for seconds, and every tenant's
 * commands waited or got 503. A create's history over 1 MiB is staged in parts of at most 256 KiB (a larger message
 * alone), each one RPUSH with the part's expiry, and the create's write renames it into place. Sizes in UTF-8 bytes,
 * what Redis holds (a CJK history is three times its UTF-16 length).
 */

const KB = 1024;
/** Each message's size: 4 turns of these make a history over the 1 MiB a create stages from. */
const MESSAGE_BYTES = 300 * KB;

describe('a fork of a large history', () => {
  const suite = largeHistorySuite();

  /**
   * A session of one turn per text forked at its last (4th) iteration, the MONITOR on while the fork is made; the
   * fork staged in 4 parts or more (RPUSHes to its `:st:` key) and its create write (the EVALSHA of 8 keys) carrying
   * no history. The source's id, the fork's, the commands the service sent naming the fork, and its parts.
   */
  async function forkOf(texts: string[]) {
    const { h } = suite;
    const id = await suite.sessionWithTurns(texts);
    const monitor = await suite.monitor();
    const fork = await h.api.post(`/v1/sessions/${id}/fork`, { at_iteration: 4 });
    assert.equal(fork.status, 201, JSON.stringify(fork.body));
    const forkId = fork.body.id as string;
    await monitor.settle();
    const commands = monitor.commands.filter((args) => args.some((a) => a.includes(`{${forkId}}`)));
    const parts = commands.filter((args) => /^rpush$/i.test(args[0]!) && args[1]!.includes(':st:'));
    assert.ok(parts.length >= 4, `staged in ${parts.length} parts`);
    const apply = commands.find((args) => /^evalsha$/i.test(args[0]!) && args[2] === '8');
    assert.ok(apply, 'the create write');
    // Its ops carry none of the history: the parts do.
    assert.ok(Buffer.byteLength(apply[12]!) < 64 * KB, `its ops: ${Buffer.byteLength(apply[12]!)} bytes`);
    return { id, forkId, commands, parts };
  }

  it('is staged in bounded parts, lands whole and leaves no staging key', async () => {
    const { h, redis } = suite;
    const { id, forkId, commands } = await forkOf(
      Array.from({ length: 4 }, (_, n) => `#${n} ${'x'.repeat(MESSAGE_BYTES)}`),
    );

    // Every command the service sent about the fork carries at most one part (or one message larger than a part).
    const largest = Math.max(...commands.map((args) => args.reduce((n, a) => n + Buffer.byteLength(a), 0)));
    assert.ok(largest < 2 * MESSAGE_BYTES, `the largest command about the fork: ${largest} bytes`);

    const source = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.equal(source.length, 8);
    const copied = (await h.api.get(`/v1/sessions/${forkId}/messages`)).body.data;
    assert.deepEqual(copied, source);
    assert.equal((await h.api.get(`/v1/sessions/${forkId}`)).body.message_count, 8);
    assert.deepEqual(await redis.keys(`s:{${forkId}}:st:*`), [], 'the staging key was renamed into place');
    assert.equal(await redis.ttl(`s:{${forkId}}:m`), -1, 'the history keeps no expiry');

    // The fork goes on as any session does.
    h.fake.enqueue(text('Forked.'));
    const next = await h.api.post(`/v1/sessions/${forkId}/messages`, { text: 'And now?' });
    assert.equal(next.status, 202);
    const done = await h.api.waitFor(forkId, (s) => s.status === 'idle' && s.iteration === 5);
    assert.equal(done.error, null);
    assert.equal((await h.api.get(`/v1/sessions/${forkId}/messages`)).body.data.length, 10);
  });

  it('weighs the history in UTF-8 bytes: CJK under 1 MiB in UTF-16 units but over it in bytes is staged', async () => {
    const { h } = suite;
    // 100 000 CJK characters a message: 100 000 UTF-16 units, 300 000 bytes; 4 of them over 1 MiB only in bytes.
    const { forkId, parts } = await forkOf(
      Array.from({ length: 4 }, (_, n) => `#${n} ${'漢'.repeat(100_000)}`),
    );
    const messageBytes = Buffer.byteLength(`#0 ${'漢'.repeat(100_000)}`);
    // A part is at most 256 KiB, or one larger message alone: never two of these messages together.
    const largest = Math.max(
      ...parts.map((args) => args.slice(2).reduce((n, a) => n + Buffer.byteLength(a), 0)),
    );
    assert.ok(largest < messageBytes + 1024, `the largest part: ${largest} bytes`);
    assert.equal((await h.api.get(`/v1/sessions/${forkId}`)).body.message_count, 8);
  });
});
