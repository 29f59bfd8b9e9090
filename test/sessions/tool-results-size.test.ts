/**
 * A step's tool results are bounded together by MAX_TURN_BYTES, as the user turn follow-ups form is: each result
 * written was sent again, with every other result of the step, in its `session.status` event, and the step's results
 * are joined in one script. Unbounded, 40 client results of 900 kB made 19 MB events, stalled Redis for seconds (every
 * tenant's requests 503) and ended in the upstream's 413.
 *
 * A client's result (PUT, POST, the chat route, a WebSocket frame, a reviewer's replacement) that would take the
 * step's results past the bound is refused with 413 and writes nothing; a result the service takes from a tool (a
 * worker's, a server tool's) is replaced by an error saying so.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { z } from 'zod';
import { ToolWorker } from '../../packages/client/src/index.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { assertSnapshotsEqual, snapshotRedis, untilRunsOver } from '../helpers/redis-snapshot.js';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { Redis } from 'ioredis';
import { InvalidRequest } from '../../src/errors.js';
import { SessionStore } from '../../src/store/store.js';
import {
  encodeResult,
  fitResults,
  resultField,
  resultsBytes,
  type PendingCall,
} from '../../src/store/pending.js';

const TURN_MAX = 100_000;
/** Three of these fit in TURN_MAX (with their blocks' JSON), a fourth does not. */
const RESULT = 30_000;
const BOOKKEEPING = /^(idem|rl):/;

const lookup = {
  name: 'lookup',
  description: 'Look something up in the client’s database.',
  input_schema: { type: 'object' as const, properties: { q: { type: 'string' } } },
};

const ids = ['toolu_a', 'toolu_b', 'toolu_c', 'toolu_d'];

const resultsSent = (h: Harness, i: number): any[] =>
  (h.fake.requests[i]!.messages.at(-1)!.content as any[]).filter((b: any) => b.type === 'tool_result');

function assertTooLarge(res: { status: number; body: any }, what: string): void {
  assert.equal(res.status, 413, `${what}: ${JSON.stringify(res.body)}`);
  assert.equal(res.body.error.code, 'payload_too_large');
  assert.equal(res.body.error.details.quota, 'MAX_TURN_BYTES');
  assert.equal(res.body.error.details.limit, TURN_MAX);
  assert.ok(res.body.error.details.turn_bytes > TURN_MAX, JSON.stringify(res.body.error.details));
}

describe('fitResults', () => {
  const call = (id: string, bytes: number | null): PendingCall => ({
    id,
    name: 'bulk',
    input: {},
    kind: 'server',
    approval: 'auto',
    ...(bytes === null ? {} : { result: { content: 'z'.repeat(bytes), is_error: false } }),
  });

  it('replaces, in the step’s order, each taken result that would take the step past the bound', () => {
    const calls = [call('c1', 400), call('s1', 300), call('s2', 700), call('s3', 100), call('s4', null)];
    const max = 1500;
    const replaced = fitResults(calls, new Set(['s1', 's2', 's3', 's4']), max);
    // c1 (a client's, ~460 B with its block) and s1 (~360 B) fit; s2 (~760 B) does not: s3 fits after its error.
    assert.deepEqual(
      replaced.map((c) => c.id),
      ['s2'],
    );
    assert.equal(calls[0]!.result!.content, 'z'.repeat(400), 'a result not taken stays as it is');
    assert.equal(calls[1]!.result!.is_error, false);
    assert.equal(calls[2]!.result!.is_error, true);
    assert.match(
      String(calls[2]!.result!.content),
      /^Error: the result of bulk is \d+ bytes; .*\(MAX_TURN_BYTES\)$/,
    );
    assert.equal(calls[3]!.result!.content, 'z'.repeat(100));
    assert.equal(calls[4]!.result, undefined);
    assert.ok(resultsBytes(calls) <= max, `${resultsBytes(calls)} B`);
    // The bytes counted are those of the blocks as stored (the `result:<id>` fields apply-8.lua sums).
    assert.equal(resultsBytes([calls[0]!]), Buffer.byteLength(encodeResult('c1', calls[0]!.result!).block));
  });

  it('leaves results that fit as they are', () => {
    const calls = [call('s1', 300), call('s2', 300)];
    assert.deepEqual(fitResults(calls, new Set(['s1', 's2']), 1000), []);
    assert.equal(calls[1]!.result!.is_error, false);
  });
});

describe('a step’s tool results are bounded by MAX_TURN_BYTES together', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', MAX_TURN_BYTES: String(TURN_MAX) } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('client results that fit are taken; the one that would pass the bound is refused with 413 and nothing is written', async () => {
    h.fake.enqueue(toolCalls(ids.map((id, i) => toolUse('lookup', { q: String(i) }, id))), text('Done.'));
    const id = (await h.api.post('/v1/sessions', { input: 'look up', tools: [lookup] })).body.id;
    await h.api.waitStatus(id, 'requires_action', 10_000);
    for (const [i, tu] of ids.slice(0, 3).entries()) {
      const put = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/${tu}`, {
        content: String(i).repeat(RESULT),
      });
      assert.ok(put.status < 300, `result ${tu}: ${put.status} ${JSON.stringify(put.body)}`);
    }
    const snap = await snapshotRedis(h.redis.url, h.service.app.engine);
    const put = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_d`, {
      content: '3'.repeat(RESULT),
    });
    assertTooLarge(put, 'PUT');
    const post = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_d', content: '3'.repeat(RESULT) }],
    });
    assertTooLarge(post, 'POST');
    assertSnapshotsEqual(
      snap,
      await snapshotRedis(h.redis.url, h.service.app.engine),
      'refused results',
      BOOKKEEPING,
    );
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'requires_action');
    assert.deepEqual(
      s.required_action.tool_calls.map((c: any) => c.id),
      ['toolu_d'],
    );
    assert.equal(s.required_action.tool_results.length, 3);

    // A result that fits is taken, and the run goes on with all four.
    const fits = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_d`, { content: 'small' });
    assert.equal(fits.status, 202, JSON.stringify(fits.body));
    const done = await h.api.waitStatus(id, ['idle', 'failed'], 10_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const sent = resultsSent(h, 1);
    assert.deepEqual(
      sent.map((b) => [b.tool_use_id, b.content.length]),
      [...ids.slice(0, 3).map((tu) => [tu, RESULT]), ['toolu_d', 5]],
    );
  });

  it('the script that writes a client’s result checks the bound: results written at once cannot both pass', async () => {
    h.fake.enqueue(toolCalls(ids.map((id, i) => toolUse('lookup', { q: String(i) }, id))), text('Done.'));
    const id = (await h.api.post('/v1/sessions', { input: 'look up', tools: [lookup] })).body.id;
    await h.api.waitStatus(id, 'requires_action', 10_000);
    const posted = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: ids.slice(0, 3).map((tu) => ({ tool_use_id: tu, content: 'x'.repeat(RESULT) })),
    });
    assert.ok(posted.status < 300, JSON.stringify(posted.body));
    const cmd = new Redis(h.redis.url);
    try {
      // As a write planned on a read from before the other results landed: only the script sees them.
      const store = new SessionStore(cmd, { eventLogMax: 1000, maxTurnBytes: TURN_MAX });
      const field = (content: string) => ({
        [resultField('toolu_d')]: encodeResult('toolu_d', { content, is_error: false }).block,
      });
      // Read once the run that asked is over: its end drops its spend mark (`spend_open`) after the commit that
      // showed the session waiting.
      await untilRunsOver(h.redis.url, h.service.app.engine);
      const before = await cmd.hgetall(`s:{${id}}`);
      await assert.rejects(
        store.apply(id, {}, { hset: field('y'.repeat(RESULT)) }, undefined, { resultsCap: true }),
        (err) => {
          assert.ok(err instanceof InvalidRequest, String(err));
          assert.equal(err.code, 'payload_too_large');
          assert.deepEqual(Object.keys(err.details as object).sort(), ['limit', 'quota', 'turn_bytes']);
          assert.ok((err.details as { turn_bytes: number }).turn_bytes > TURN_MAX);
          return true;
        },
      );
      assert.deepEqual(await cmd.hgetall(`s:{${id}}`), before, 'nothing written');
      // One that fits, and one that makes a stored result smaller, pass.
      await store.apply(id, {}, { hset: field('small') }, undefined, { resultsCap: true });
      await store.apply(
        id,
        {},
        {
          hset: {
            [resultField('toolu_a')]: encodeResult('toolu_a', { content: 'a', is_error: false }).block,
          },
        },
        undefined,
        { resultsCap: true },
      );
    } finally {
      cmd.disconnect();
    }
  });

  it('several results at once that would pass the bound are refused together', async () => {
    h.fake.enqueue(toolCalls(ids.map((id, i) => toolUse('lookup', { q: String(i) }, id))), text('Done.'));
    const id = (await h.api.post('/v1/sessions', { input: 'look up', tools: [lookup] })).body.id;
    await h.api.waitStatus(id, 'requires_action', 10_000);
    const snap = await snapshotRedis(h.redis.url, h.service.app.engine);
    const post = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: ids.map((tu) => ({ tool_use_id: tu, content: 'x'.repeat(RESULT) })),
    });
    assertTooLarge(post, 'POST of four');
    assertSnapshotsEqual(
      snap,
      await snapshotRedis(h.redis.url, h.service.app.engine),
      'refused results',
      BOOKKEEPING,
    );
    const ok = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: ids.map((tu) => ({ tool_use_id: tu, content: 'x'.repeat(RESULT / 2) })),
    });
    assert.equal(ok.status, 202, JSON.stringify(ok.body));
    assert.equal((await h.api.waitStatus(id, ['idle', 'failed'], 10_000)).status, 'idle');
  });

  it('a worker’s result that would pass the bound is taken as an error saying so', async () => {
    const bulk = betaZodTool({
      name: 'bulk',
      description: 'Answers with a lot of text.',
      inputSchema: z.object({ n: z.number() }),
      run: async ({ n }) => String(n).repeat(RESULT),
    });
    const worker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: 'key-a',
      tools: [bulk],
      concurrency: 4,
      workerId: 'bulk',
      waitMs: 2000,
    });
    await worker.start();
    try {
      h.fake.enqueue(toolCalls(ids.map((id, i) => toolUse('bulk', { n: i }, id))), text('Done.'));
      const id = (await h.api.post('/v1/sessions', { input: 'bulk', tools: ['bulk'] })).body.id;
      const done = await h.api.waitStatus(id, ['idle', 'failed'], 30_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      const sent = resultsSent(h, 1);
      assert.deepEqual(
        sent.map((b) => b.tool_use_id),
        ids,
      );
      // Whichever three were delivered first fit; the last one is an error naming the bound.
      const errors = sent.filter((b) => b.is_error);
      assert.equal(errors.length, 1, JSON.stringify(sent.map((b) => [b.tool_use_id, b.is_error])));
      assert.match(errors[0].content, /^Error: the result of bulk is \d+ bytes; .*\(MAX_TURN_BYTES\)$/);
      assert.equal(sent.filter((b) => !b.is_error && b.content.length === RESULT).length, 3);
    } finally {
      await worker.stop();
    }
  });
});
