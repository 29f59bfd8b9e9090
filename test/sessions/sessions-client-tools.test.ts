import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { monitorRedis } from '../helpers/redis-monitor.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { assertSnapshotsEqual, snapshotDiff, snapshotRedis } from '../helpers/redis-snapshot.js';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { validateConversation } from '../fake/server.js';
import { ApiError, isSession, type SubmitToolResultsBody } from '../../packages/client/src/index.js';

/**
 * Bookkeeping a refused request still leaves: idempotency records (`idem:{tenant}:…`, the answers kept for the
 * client's Idempotency-Keys) and the tenant's rate-limit window (`rl:{tenant}`: mutating requests count).
 */
const BOOKKEEPING = /^(idem|rl):/;
const idemAdded = (diff: string[]) => diff.filter((d) => d.startsWith('added idem:')).length;

/** The client's typed error for a refused request: the status and the contract's code. */
const refusedWith =
  (status: number, code: string, what = code) =>
  (err: unknown) => {
    assert.ok(err instanceof ApiError, `${what}: ${String(err)}`);
    assert.equal(err.status, status, `${what}: ${err.code} ${err.message}`);
    assert.equal(err.code, code, what);
    return true;
  };

const lookup = {
  name: 'lookup',
  description: 'Look something up in the client’s database.',
  input_schema: { type: 'object' as const, properties: { q: { type: 'string' } } },
};

describe('client tools', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  // The main flows go through the typed client (test/helpers/service.ts), so it cannot drift from the service.
  const create = async () => {
    const r = await h.client.api.POST('/v1/sessions', {
      body: { input: 'Find q and add', tools: [lookup, 'calculate_sum'] },
    });
    assert.equal(r.response.status, 201, JSON.stringify(r.error));
    return r.data!.id;
  };

  it('the client tool is declared to the model with its schema; a mixed reply waits only for the client call', async () => {
    // The model calls the client tool first, then the server tool: results go back in that order.
    h.fake.enqueue(
      toolCalls(
        [
          toolUse('lookup', { q: 'answer' }, 'toolu_look'),
          toolUse('calculate_sum', { a: 20, b: 22 }, 'toolu_sum'),
        ],
        { preamble: 'Let me check.' },
      ),
      text('It is 42.'),
    );
    const id = await create();
    const s = await h.client.waitFor(id, ['requires_action', 'idle', 'failed'], { timeoutMs: 10_000 });
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.equal(s.stop_reason, null);
    assert.deepEqual(s.required_action, {
      type: 'submit_tool_results',
      tool_calls: [{ id: 'toolu_look', name: 'lookup', input: { q: 'answer' } }],
      tool_results: [{ tool_use_id: 'toolu_sum', content: '42', is_error: false }],
    });
    const sentTools: any[] = h.fake.requests[0]!.tools ?? [];
    assert.deepEqual(
      sentTools.find((t: any) => t.name === 'lookup'),
      lookup,
      'the model sees the client tool as declared',
    );
    assert.ok(sentTools.some((t: any) => t.name === 'calculate_sum'));
    assert.equal(h.fake.requests.length, 1, 'no turn is sent while a client result is missing');
    // the history ends with the unanswered calls
    const msgs = await h.client.listMessages(id);
    assert.deepEqual(msgs.pending_tool_calls, ['toolu_look', 'toolu_sum']);

    // wrong ids and a server call's id are refused with a code, and change nothing
    const snap = await snapshotRedis(h.redis.url, h.service.app.engine);
    await assert.rejects(
      h.client.putToolResult(id, 'toolu_nope', { content: 'x' }),
      refusedWith(409, 'unknown_tool_use_id'),
    );
    await assert.rejects(
      h.client.putToolResult(id, 'toolu_sum', { content: '41' }),
      refusedWith(409, 'tool_result_already_submitted'),
    );
    await assert.rejects(h.client.decideToolCall(id, 'toolu_look', { decision: 'approve' }), (err) => {
      assert.ok(err instanceof ApiError && err.status === 409, String(err));
      return true;
    });
    // The client sends every POST with an Idempotency-Key, whose answer (the refusal) the service keeps: nothing else.
    const after1 = await snapshotRedis(h.redis.url, h.service.app.engine);
    assertSnapshotsEqual(snap, after1, 'refused results', BOOKKEEPING);
    assert.equal(idemAdded(snapshotDiff(snap, after1)), 1, 'the refused decision (a POST) kept its answer');

    const put = await h.client.api.PUT('/v1/sessions/{id}/tool-results/{tool_use_id}', {
      params: { path: { id, tool_use_id: 'toolu_look' } },
      body: { content: [{ type: 'text', text: 'the answer is 42' }] },
    });
    assert.equal(put.response.status, 202, JSON.stringify(put.error));
    assert.equal(put.response.headers.get('etag'), `"${put.data!.revision}"`);
    const done = await h.client.waitFor(id, ['idle', 'failed'], { timeoutMs: 10_000 });
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.stop_reason, 'end_turn');
    assert.equal(done.iteration, 2);
    assert.equal(h.fake.requests.length, 2);
    const next = h.fake.requests[1]!.messages;
    assert.deepEqual(next.at(-1), {
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 'toolu_look',
          content: [{ type: 'text', text: 'the answer is 42' }],
        },
        { type: 'tool_result', tool_use_id: 'toolu_sum', content: '42' },
      ],
    });
    assert.doesNotThrow(() => validateConversation(next, true));

    // answering again once it is answered: 409, nothing changes
    const snap2 = await snapshotRedis(h.redis.url, h.service.app.engine);
    await assert.rejects(
      h.client.putToolResult(id, 'toolu_look', { content: 'again' }),
      refusedWith(409, 'nothing_awaits_results'),
    );
    assertSnapshotsEqual(
      snap2,
      await snapshotRedis(h.redis.url, h.service.app.engine),
      'a late answer',
      BOOKKEEPING,
    );

    const rec = await h.client.getIteration(id, 1);
    assert.deepEqual(rec.tool_calls, [
      { id: 'toolu_look', name: 'lookup' },
      { id: 'toolu_sum', name: 'calculate_sum' },
    ]);
    assert.deepEqual(rec.tool_results, next.at(-1));
  });

  it('a result is written once: the route stores its block, the commit of the results turn only names it', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('lookup', { q: 'a' }, 'toolu_o1'),
        toolUse('calculate_sum', { a: 1, b: 2 }, 'toolu_o2'),
      ]),
      text('Done.'),
    );
    const id = await create();
    const s = await h.client.waitFor(id, ['requires_action', 'idle', 'failed'], { timeoutMs: 10_000 });
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    // Every script call while the result goes from the route to the model, with its ops parsed.
    const monitor = await monitorRedis(h.redis.port);
    const marker = `marker-${Date.now()}`;
    const content = [{ type: 'text' as const, text: `${marker} "quoted"\u2028✓` }];
    await h.client.putToolResult(id, 'toolu_o1', { content });
    const done = await h.client.waitFor(id, ['idle', 'failed'], { timeoutMs: 10_000 });
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    // MONITOR lines come after the commands ran: wait for the run's last one (its due entry dropped:
    // run-due-drop-1.lua, the one key runs:due, then the id).
    const ended = (args: string[]) =>
      /^evalsha$/i.test(args[0] ?? '') && args[2] === '1' && args[3] === 'runs:due' && args[4] === id;
    for (const t0 = Date.now(); !monitor.commands.some(ended);) {
      assert.ok(Date.now() - t0 < 10_000, 'the end of the run shows in MONITOR');
      await new Promise((r) => setTimeout(r, 10));
    }
    monitor.stop();
    const applies = monitor.commands
      .filter((args) => /^evalsha$/i.test(args[0] ?? '') && args[2] === '8' && args[12]?.startsWith('{'))
      .map((args): Record<string, any> => JSON.parse(args[12]!));

    // Where the result's bytes went, events aside (they tell of it: `tool_result.submitted`, `tool.completed`).
    const places = applies.flatMap((ops) => {
      const { events: _e, ...rest } = ops;
      return JSON.stringify(rest).includes(marker) ? [rest] : [];
    });
    assert.equal(places.length, 1, `written once, by the route: ${JSON.stringify(places).slice(0, 2000)}`);
    assert.deepEqual(
      Object.keys(places[0]!['hset']).filter((f) => JSON.stringify(places[0]!['hset'][f]).includes(marker)),
      ['result:toolu_o1'],
      'into the field of its call, not into the pending step',
    );
    const turn = applies.find((ops) => ops['queue']?.['results']);
    assert.ok(turn, 'the results turn was committed with `queue.results`');
    assert.deepEqual(turn['queue']['results'][0], ['toolu_o1'], 'the stored result is named, not sent');
    assert.equal(turn['queue']['results'][1][0], 'toolu_o2');
    // What the model got is what the client sent.
    assert.deepEqual(h.fake.requests[1]!.messages.at(-1), {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_o1', content },
        { type: 'tool_result', tool_use_id: 'toolu_o2', content: '3' },
      ],
    });
  });

  it('a step stored with its results inline (before they had fields of their own) still goes on', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('lookup', { q: 'a' }, 'toolu_v1'),
        toolUse('calculate_sum', { a: 2, b: 2 }, 'toolu_v2'),
      ]),
      text('Done.'),
    );
    const id = await create();
    const s = await h.client.waitFor(id, ['requires_action', 'idle', 'failed'], { timeoutMs: 10_000 });
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    // Rewrite the step as an earlier version stored it: each result inside the step's JSON.
    const r = new Redis(h.redis.url);
    try {
      const meta = `s:{${id}}`;
      const step = JSON.parse((await r.hget(meta, 'pending'))!);
      const stored = JSON.parse((await r.hget(meta, 'result:toolu_v2'))!);
      step.calls[1].result = { content: stored.content, is_error: false };
      await r.hset(meta, 'pending', JSON.stringify(step));
      await r.hdel(meta, 'result:toolu_v1', 'result:toolu_v2');
    } finally {
      r.disconnect();
    }
    const view = await h.client.getSession(id);
    assert.deepEqual(view.required_action, s.required_action, 'read as before');
    await h.client.putToolResult(id, 'toolu_v1', { content: 'found' });
    const done = await h.client.waitFor(id, ['idle', 'failed'], { timeoutMs: 10_000 });
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.deepEqual(h.fake.requests[1]!.messages.at(-1), {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_v1', content: 'found' },
        { type: 'tool_result', tool_use_id: 'toolu_v2', content: '4' },
      ],
    });
  });

  it('POST tool-results answers several calls; partial answers wait, answered and unknown ids are 409, one id twice 400', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('lookup', { q: 'one' }, 'toolu_l1'),
        toolUse('calculate_sum', { a: 1, b: 1 }, 'toolu_s1'),
        toolUse('lookup', { q: 'two' }, 'toolu_l2'),
        toolUse('lookup', { q: 'three' }, 'toolu_l3'),
      ]),
      text('Got them all.'),
    );
    const id = await create();
    const s = await h.client.waitFor(id, ['requires_action', 'idle', 'failed'], { timeoutMs: 10_000 });
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.deepEqual(
      s.required_action!.tool_calls.map((c) => c.id),
      ['toolu_l1', 'toolu_l2', 'toolu_l3'],
    );

    // two of three; `continue: true` does not go on while one is missing
    const part = await h.client.api.POST('/v1/sessions/{id}/tool-results', {
      params: { path: { id } },
      body: {
        results: [
          { tool_use_id: 'toolu_l3', content: 'three!' },
          { tool_use_id: 'toolu_l1', content: 'one!', is_error: false },
        ],
        continue: true,
      },
    });
    assert.equal(part.response.status, 200, JSON.stringify(part.error));
    assert.equal(part.data!.status, 'requires_action');
    assert.ok(isSession(part.data!), 'a tenant key reads the whole session');
    assert.deepEqual(part.data.required_action!.tool_calls, [
      { id: 'toolu_l2', name: 'lookup', input: { q: 'two' } },
    ]);
    assert.deepEqual(
      part.data.required_action!.tool_results.map((r) => r.tool_use_id),
      ['toolu_l1', 'toolu_s1', 'toolu_l3'],
    );
    assert.equal(h.fake.requests.length, 1);

    const snap = await snapshotRedis(h.redis.url, h.service.app.engine);
    const refusals: Array<[string, SubmitToolResultsBody, string]> = [
      [
        'an answered call',
        { results: [{ tool_use_id: 'toolu_l1', content: 'x' }] },
        'tool_result_already_submitted',
      ],
      [
        'a batch with one unknown id',
        {
          results: [
            { tool_use_id: 'toolu_l2', content: 'two!' },
            { tool_use_id: 'toolu_bogus', content: 'x' },
          ],
        },
        'unknown_tool_use_id',
      ],
      [
        'a server call',
        { results: [{ tool_use_id: 'toolu_s1', content: 'x' }] },
        'tool_result_already_submitted',
      ],
    ];
    for (const [what, body, code] of refusals) {
      await assert.rejects(h.client.submitToolResults(id, body), refusedWith(409, code, what));
    }
    const after2 = await snapshotRedis(h.redis.url, h.service.app.engine);
    assertSnapshotsEqual(snap, after2, 'refused batches are all-or-nothing', BOOKKEEPING);
    assert.equal(
      idemAdded(snapshotDiff(snap, after2)),
      refusals.length,
      "each refused POST's answer, kept for its key",
    );

    // The same call twice in one batch is a malformed request (as in a chat's messages), not an answered call.
    const twice = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: [
        { tool_use_id: 'toolu_l2', content: 'a' },
        { tool_use_id: 'toolu_l2', content: 'b' },
      ],
    });
    assert.equal(twice.status, 400, JSON.stringify(twice.body));
    assert.equal(twice.body.error.code, 'invalid_request');
    assert.equal(twice.body.error.details[0].path, '/results/1/tool_use_id');
    assertSnapshotsEqual(
      after2,
      await snapshotRedis(h.redis.url, h.service.app.engine),
      'nothing written',
      BOOKKEEPING,
    );

    const last = await h.client.api.POST('/v1/sessions/{id}/tool-results', {
      params: { path: { id } },
      body: { results: [{ tool_use_id: 'toolu_l2', content: 'two failed', is_error: true }], continue: true },
    });
    assert.equal(last.response.status, 202, JSON.stringify(last.error));
    const done = await h.client.waitFor(id, ['idle', 'failed'], { timeoutMs: 10_000 });
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.deepEqual(h.fake.requests[1]!.messages.at(-1), {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_l1', content: 'one!' },
        { type: 'tool_result', tool_use_id: 'toolu_s1', content: '2' },
        { type: 'tool_result', tool_use_id: 'toolu_l2', content: 'two failed', is_error: true },
        { type: 'tool_result', tool_use_id: 'toolu_l3', content: 'three!' },
      ],
    });
    const msgs = await h.client.listMessages(id);
    assert.deepEqual(msgs.data.slice(0, -1), h.fake.requests[1]!.messages);
    assert.deepEqual(msgs.pending_tool_calls, []);
  });
});
