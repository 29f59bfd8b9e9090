/**
 * Compaction (contract §6.1): the fake Messages API answers compaction requests and server-side compaction as the API
 * does, the SDK runner's own `compactBeforeNextTurn()` drives it, and the service compacts sessions through it —
 * by the route (while running: after that turn's tools; while idle: at once) and by the `compaction` policy — keeping
 * every message it summarizes (`?include=compacted`).
 */
import '../helpers/test-tools-env.js';
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import type { BetaMessage, BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { z } from 'zod';
import {
  COMPACTION_BETA,
  CONTEXT_COMPACTION_BETA,
  startFakeAnthropic,
  text,
  toolCall,
  type FakeAnthropic,
} from '../fake/server.js';
import { offlineReply } from '../../src/offline/model.js';
import { conversationStart, readSummary, signSummary } from '../../src/offline/compaction.js';
import type { FakeHandler, FakeRequest } from '../../src/offline/wire.js';
import { checkHistory } from '../../src/history.js';
import { startHarness, type Harness } from '../helpers/service.js';

const MODEL = 'claude-fake-1';

const textOf = (m: BetaMessage | BetaMessageParam) =>
  typeof m.content === 'string'
    ? m.content
    : (m.content ?? []).map((b) => (b.type === 'text' ? b.text : '')).join('');

describe('the fake Messages API: compaction', () => {
  let fake: FakeAnthropic;
  before(async () => {
    fake = await startFakeAnthropic();
  });
  after(async () => {
    await fake.close();
  });
  beforeEach(() => fake.reset());
  const client = () => new Anthropic({ apiKey: 'test', baseURL: fake.url, maxRetries: 0 });

  test("the runner's compactBeforeNextTurn(): one summarize request, the history replaced by the signed block, the model goes on from it", async () => {
    const weather = betaZodTool({
      name: 'get_weather',
      description: 'The weather in a city',
      inputSchema: z.object({ location: z.string() }),
      run: ({ location }) => `Sunny, 21°C in ${location}`,
    });
    const runner = client().beta.messages.toolRunner({
      model: MODEL,
      max_tokens: 256,
      betas: [COMPACTION_BETA],
      stop_sequences: ['\n\nHuman:'],
      messages: [{ role: 'user', content: "What's the weather in Paris?" }],
      tools: [weather],
      thread: false,
    });
    const seen: BetaMessage[] = [];
    for await (const message of runner) {
      seen.push(message);
      if (seen.length === 1)
        runner.compactBeforeNextTurn({ type: 'summarize', instructions: 'Keep the city.' });
    }
    // The turn with the call, the compaction (after the tool ran), then the model's answer from the summary.
    assert.equal(fake.requests.length, 3);
    const [, compaction, after] = fake.requests;
    assert.deepEqual(compaction!.body.compaction, { type: 'summarize', instructions: 'Keep the city.' });
    assert.equal(compaction!.body.stop_sequences, undefined, 'the SDK leaves reply params out');
    assert.ok(String(compaction!.headers['anthropic-beta']).includes(COMPACTION_BETA));
    // What was summarized: the question, the call and its result.
    assert.deepEqual(
      compaction!.messages.map((m) => m.role),
      ['user', 'assistant', 'user'],
    );
    const block = seen[1]!.content[0]!;
    assert.equal(block.type, 'compaction');
    assert.equal(seen[1]!.stop_reason, 'compaction');
    assert.ok(block.type === 'compaction' && block.content?.includes('get_weather'));
    assert.ok(block.type === 'compaction' && block.content?.includes('Keep the city.'));
    assert.equal(
      block.type === 'compaction' && block.signature,
      signSummary(block.type === 'compaction' ? block.content : null),
    );
    // The next request starts with the block, as returned, and nothing else: the model goes on from it.
    assert.equal(after!.messages.length, 1);
    assert.deepEqual(after!.messages[0], { role: 'assistant', content: seen[1]!.content });
    assert.equal(textOf(seen[2]!), 'The weather in Paris is sunny, 21°C in Paris.');
    assert.equal(after!.status, 200);
  });

  test('input tokens are counted from the last compaction block on', async () => {
    const long = 'x'.repeat(40_000);
    const res = await client().beta.messages.create({
      model: MODEL,
      max_tokens: 64,
      betas: [COMPACTION_BETA],
      messages: [
        { role: 'user', content: long },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: 'summarize' },
      ],
      compaction: { type: 'summarize' },
    });
    assert.ok(res.usage.input_tokens >= 10_000);
    const summary = res.content[0]!;
    assert.equal(summary.type, 'compaction');
    assert.ok(summary.type === 'compaction' && (summary.content?.length ?? 0) < 4100);
    const after = await client().beta.messages.create({
      model: MODEL,
      max_tokens: 64,
      betas: [COMPACTION_BETA],
      messages: [
        { role: 'user', content: long },
        { role: 'assistant', content: res.content },
        { role: 'user', content: 'and now?' },
      ],
    });
    assert.ok(after.usage.input_tokens < 2_000, `only the summary on is read: ${after.usage.input_tokens}`);
  });

  test('bad compaction input is refused as the API does', async () => {
    const ok = await client().beta.messages.create({
      model: MODEL,
      max_tokens: 64,
      betas: [COMPACTION_BETA],
      messages: [{ role: 'user', content: 'hello there' }],
      compaction: { type: 'summarize' },
    });
    const block = ok.content[0]!;
    assert.equal(block.type, 'compaction');
    const refused = async (params: Record<string, unknown>, pattern: RegExp) => {
      await assert.rejects(
        client().beta.messages.create({ model: MODEL, max_tokens: 64, ...params } as never),
        (err: unknown) => err instanceof Anthropic.BadRequestError && pattern.test(err.message),
      );
    };
    // No beta header.
    await refused(
      { messages: [{ role: 'user', content: 'hi' }], compaction: { type: 'summarize' } },
      /anthropic-beta/,
    );
    // With context_management.
    await refused(
      {
        betas: [COMPACTION_BETA, CONTEXT_COMPACTION_BETA],
        messages: [{ role: 'user', content: 'hi' }],
        compaction: { type: 'summarize' },
        context_management: { edits: [{ type: 'compact_20260112' }] },
      },
      /context_management/,
    );
    // A conversation ending with unanswered tool calls.
    await refused(
      {
        betas: [COMPACTION_BETA],
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'x', input: {} }] },
        ],
        compaction: { type: 'summarize' },
      },
      /tool calls that have no results/,
    );
    // A tampered summary.
    const tampered = block.type === 'compaction' ? { ...block, content: `${block.content} (edited)` } : block;
    await refused(
      {
        betas: [COMPACTION_BETA],
        messages: [
          { role: 'assistant', content: [tampered] },
          { role: 'user', content: 'go' },
        ],
      },
      /signature does not match/,
    );
    // Not first in its message; in a user message.
    await refused(
      {
        betas: [COMPACTION_BETA],
        messages: [
          { role: 'assistant', content: [{ type: 'text', text: 'hi' }, block] },
          { role: 'user', content: 'go' },
        ],
      },
      /first block of its message/,
    );
    await refused(
      { betas: [COMPACTION_BETA], messages: [{ role: 'user', content: [block] }] },
      /only appear in assistant messages/,
    );
    // What follows the block must be valid from there: a result for a call the summary replaced answers nothing.
    await refused(
      {
        betas: [COMPACTION_BETA],
        messages: [
          { role: 'assistant', content: [block] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_gone', content: 'x' }] },
        ],
      },
      /unexpected `tool_use_id`/,
    );
    // Sending the block back needs the beta too.
    await refused(
      {
        messages: [
          { role: 'assistant', content: [block] },
          { role: 'user', content: 'go' },
        ],
      },
      /anthropic-beta/,
    );
  });

  test('context_management compaction: past the trigger the reply is the summary with stop_reason compaction, and the runner goes on', async () => {
    const runner = client().beta.messages.toolRunner({
      model: MODEL,
      max_tokens: 256,
      betas: [CONTEXT_COMPACTION_BETA],
      context_management: {
        edits: [
          {
            type: 'compact_20260112',
            trigger: { type: 'input_tokens', value: 800 },
            pause_after_compaction: true,
          },
        ],
      },
      messages: [{ role: 'user', content: `${'Some long background. '.repeat(200)} What is 2 plus 3?` }],
      tools: [
        betaZodTool({
          name: 'calculate_sum',
          description: 'a + b',
          inputSchema: z.object({ a: z.number(), b: z.number() }),
          run: ({ a, b }) => String(a + b),
        }),
      ],
      thread: false,
    });
    const stops: Array<string | null> = [];
    for await (const message of runner) stops.push(message.stop_reason);
    assert.equal(stops[0], 'compaction');
    // The runner resumed the paused turn (the history ends with the block), and the model went on from the summary.
    const resumed = fake.requests[1]!;
    assert.equal(resumed.messages.at(-1)!.role, 'assistant');
    assert.equal((resumed.messages.at(-1)!.content as Array<{ type: string }>)[0]!.type, 'compaction');
    assert.deepEqual(stops.slice(1), ['tool_use', 'end_turn']);
    assert.match(textOf(await runner.done()), /The sum is 5/);
  });

  test('the offline model answers from a summary: open tool results, else the open request', () => {
    const summary = [
      'Summary of the conversation so far (3 messages).',
      "Still to answer: What's the weather in Paris?",
      'Tool results the assistant has not answered yet:',
      '- get_weather {"location":"Paris"} => Sunny, 21°C',
    ].join('\n');
    const reading = readSummary(summary);
    assert.equal(reading.openResults.length, 1);
    const fromResults = offlineReply({
      body: { model: MODEL, max_tokens: 10, messages: [] },
      headers: {},
      messages: [
        {
          role: 'assistant',
          content: [{ type: 'compaction', content: summary, signature: signSummary(summary) }],
        },
      ],
      system: undefined,
      tools: [{ name: 'get_weather', input_schema: { type: 'object', properties: { location: {} } } }],
      stream: false,
      at: 0,
    });
    assert.equal(
      textOf({
        role: 'assistant',
        content: fromResults.content.map((b) => (b.type === 'text' ? b : { type: 'text', text: '' })),
      } as BetaMessageParam),
      'The weather in Paris is sunny, 21°C.',
    );
    const onlyOpen = summary.split('\n').slice(0, 2).join('\n');
    const fromRequest = offlineReply({
      body: { model: MODEL, max_tokens: 10, messages: [] },
      headers: {},
      messages: [
        {
          role: 'assistant',
          content: [{ type: 'compaction', content: onlyOpen, signature: signSummary(onlyOpen) }],
        },
      ],
      system: undefined,
      tools: [{ name: 'get_weather', input_schema: { type: 'object', properties: { location: {} } } }],
      stream: false,
      at: 0,
    });
    assert.ok(fromRequest.content.some((b) => b.type === 'tool_use' && b.name === 'get_weather'));
  });

  test('a scripted compaction without a summary is a no-op for the runner (it keeps the history)', async () => {
    fake.enqueue(
      text('first'),
      { type: 'message', content: [{ type: 'compaction', content: null }] },
      text('second'),
    );
    const runner = client().beta.messages.toolRunner({
      model: MODEL,
      max_tokens: 64,
      betas: [COMPACTION_BETA],
      messages: [{ role: 'user', content: 'hi' }],
      tools: [],
      thread: false,
    });
    let n = 0;
    for await (const m of runner) {
      n++;
      if (n === 1) {
        runner.compactBeforeNextTurn();
        runner.pushMessages({ role: 'user', content: 'more' });
      }
      void m;
    }
    assert.equal(fake.requests.length, 3);
    assert.deepEqual(fake.requests[1]!.body.compaction, { type: 'summarize' });
    // The caller's push in the loop body replaces the reply (SDK semantics); the failed compaction changed nothing.
    assert.deepEqual(
      fake.requests[2]!.messages.map((m) => textOf(m)),
      ['hi', 'more'],
    );
    void toolCall;
  });
});

/* ---- the service ---------------------------------------------------------------------------------------------- */

/** Text of a message's blocks (tool results' text included). */
function allText(m: { content?: unknown }): string {
  if (typeof m.content === 'string') return m.content;
  if (!Array.isArray(m.content)) return '';
  return m.content
    .map((b: { type?: string; text?: string; content?: unknown }) =>
      b.type === 'text' ? (b.text ?? '') : b.type === 'tool_result' ? allText({ content: b.content }) : '',
    )
    .join(' ');
}

/**
 * A model that counts: each turn calls `pad` for the next step (a 2 kB result labelled "step N"), and says
 * "Done after N steps." after `steps`. It knows the last step only from what it reads — the results since the last
 * compaction, or the summary — so a summary that lost the count makes it repeat or skip a step.
 */
function countingModel(steps: number): FakeHandler {
  return (req: FakeRequest) => {
    const seen = req.messages.slice(conversationStart(req.messages));
    let last = 0;
    const note = (text: string) => {
      for (const m of text.matchAll(/step (\d+):/g)) last = Math.max(last, Number(m[1]));
    };
    for (const m of seen) {
      const first = Array.isArray(m.content) ? m.content[0] : undefined;
      if (first && first.type === 'compaction' && typeof first.content === 'string') {
        for (const line of readSummary(first.content).toolLines) note(line);
      } else if (m.role === 'user') note(allText(m));
    }
    if (last >= steps) return text(`Done after ${last} steps.`);
    return toolCall('pad', { bytes: 2048, label: `step ${last + 1}` });
  };
}

describe('sessions: compaction', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  async function create(body: Record<string, unknown>) {
    const r = await h.api.post('/v1/sessions', body);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  }
  /** The whole event log (as far as it is kept), page by page. */
  async function events(id: string) {
    const all: Array<{ type: string; data: any }> = [];
    let after = '';
    for (;;) {
      const page = (await h.api.get(`/v1/sessions/${id}/events?limit=1000${after ? `&after=${after}` : ''}`))
        .body;
      all.push(...page.data);
      if (!page.has_more) return all;
      after = page.next_cursor;
    }
  }
  const records = async (id: string) => (await h.api.get(`/v1/sessions/${id}/iterations`)).body.data as any[];

  test('a compaction that reaches the budget sends no turn after it: the budget is checked before every model request', async () => {
    const run = async (budget?: number) => {
      h.fake.setHandler(countingModel(40));
      const s = await create({
        input: 'Count to 40 with the pad tool.',
        tools: ['pad'],
        max_iterations: 1000,
        stream: false,
        compaction: { at_input_tokens: 6000 },
        ...(budget === undefined ? {} : { budget: { total_tokens: budget } }),
      });
      const done = await h.api.waitStatus(s.id, ['idle', 'failed'], 60_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      return { done, recs: await records(s.id) };
    };
    const spent = (r: any) =>
      r.usage.input_tokens +
      r.usage.output_tokens +
      r.usage.cache_creation_input_tokens +
      r.usage.cache_read_input_tokens;
    // Unbounded, the run's records (the fake's usage follows the requests: the same each time).
    const free = await run();
    const k = free.recs.findIndex((r) => r.kind === 'compaction');
    assert.ok(k > 0, 'a compaction happened');
    const upTo = free.recs.slice(0, k + 1).reduce((n: number, r: any) => n + spent(r), 0);
    // A budget the first compaction reaches exactly: the run stops there, with no turn sent after it.
    const capped = await run(upTo);
    assert.equal(capped.done.stop_reason, 'budget_exhausted');
    assert.deepEqual(
      capped.recs.map((r) => r.kind ?? 'turn'),
      free.recs.slice(0, k + 1).map((r) => r.kind ?? 'turn'),
    );
    assert.equal(capped.done.usage.budget_remaining_tokens, 0);
  });

  test('200 iterations with 2 kB tool results under `compaction: {at_input_tokens}`: every request stays under the bound, the model goes on right after each compaction, and nothing is lost', async () => {
    const STEPS = 200;
    const AT = 6000;
    h.fake.setHandler(countingModel(STEPS));
    const s = await create({
      input: `Count to ${STEPS} with the pad tool.`,
      tools: ['pad'],
      max_iterations: 1000,
      // Replies whole: 200 turns of stream events would only slow the test down.
      stream: false,
      compaction: { at_input_tokens: AT },
    });
    assert.deepEqual(s.compaction, { at_input_tokens: AT });
    const done = await h.api.waitStatus(s.id, ['idle', 'failed'], 120_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.stop_reason, 'end_turn');

    const recs = await records(s.id);
    const compactions = recs.filter((r) => r.kind === 'compaction');
    const turns = recs.filter((r) => r.kind === undefined);
    assert.equal(turns.length, STEPS + 1, 'one turn per step and the final answer');
    assert.ok(compactions.length >= 10, `compacted ${compactions.length} times`);
    // `iteration` counts model turns only; compactions have their own count; the records hold both, numbered.
    assert.equal(done.iteration, turns.length);
    assert.equal(done.compactions, compactions.length);
    assert.deepEqual(
      recs.map((r) => r.n),
      recs.map((_, i) => i + 1),
    );
    assert.deepEqual(
      turns.map((r) => r.iteration),
      turns.map((_, i) => i + 1),
    );
    // Every request the fake received stays under the bound: the threshold, plus the growth of the turn that crossed
    // it (a turn just under the threshold grows by one 2 kB result, the next one crosses it, its result comes in).
    const bound = AT + 1500;
    // (Within a run the SDK threads the conversation, so a body may hold only what a turn added: the size that counts
    // is the conversation the model read, from the last summary on.)
    const biggest = Math.max(
      ...h.fake.requests.map((r) => {
        const { messages, ...rest } = r.body;
        void messages;
        const seen = r.messages.slice(conversationStart(r.messages));
        return Math.ceil((JSON.stringify(rest).length + JSON.stringify(seen).length) / 4);
      }),
    );
    assert.ok(biggest <= bound, `largest request ~${biggest} tokens > ${bound}`);
    assert.ok(Math.max(...recs.map((r) => r.usage.input_tokens)) <= bound);
    // Each compaction came after a turn that reached the threshold, and the next turn went on from it.
    for (const c of compactions) {
      const before = recs[c.n - 2];
      assert.ok(before.usage.input_tokens >= AT, `compaction ${c.n} after ${before.usage.input_tokens}`);
      // A compaction's `iteration` is the model turns completed before it.
      assert.equal(c.iteration, before.iteration);
      assert.equal(c.summarized_messages > 0, true);
    }
    const msgs = await h.api.get(`/v1/sessions/${s.id}/messages?include=compacted`);
    assert.equal(msgs.status, 200);
    assert.equal(allText(msgs.body.data.at(-1)), `Done after ${STEPS} steps.`);
    // Nothing lost: the segments (oldest first) and the history hold every message the session ever had.
    const segments = msgs.body.compacted as Array<{ at_iteration: number; messages: any[] }>;
    assert.equal(
      segments.length,
      compactions.length,
      JSON.stringify(compactions.map((c) => [c.n, c.summarized_messages, c.reply_index, c.stop_reason])) +
        JSON.stringify(segments.map((g) => [g.at_iteration, g.messages.length])),
    );
    assert.deepEqual(
      segments.map((g) => g.at_iteration),
      compactions.map((c) => c.n),
    );
    const everything = [...segments.flatMap((g) => g.messages), ...msgs.body.data];
    assert.equal(allText(everything[0]), `Count to ${STEPS} with the pad tool.`);
    const results = everything
      .filter((m) => m.role === 'user' && m.content[0]?.type === 'tool_result')
      .map((m) => Number(/step (\d+):/.exec(allText(m))![1]));
    assert.deepEqual(
      results,
      Array.from({ length: STEPS }, (_, i) => i + 1),
    );
    assert.ok(everything.every((m) => m.role !== 'user' || allText(m).length < 3000));
    // Each segment was a valid history when it was summarized; the live one is valid from its summary on.
    for (const g of segments.slice(1)) assert.equal(g.messages[0].content[0].type, 'compaction');
    assert.equal(msgs.body.data[0].content[0].type, 'compaction');
    // Iteration records index the whole record: the first reply is read back from its segment.
    const first = await h.api.get(`/v1/sessions/${s.id}/iterations/1`);
    assert.equal(first.body.reply.content[0].input.label, 'step 1');
    assert.match(allText(first.body.tool_results), /^step 1: /);
    const lastTurn = await h.api.get(`/v1/sessions/${s.id}/iterations/${recs.length}`);
    assert.equal(allText(lastTurn.body.reply), `Done after ${STEPS} steps.`);
    const aCompaction = await h.api.get(`/v1/sessions/${s.id}/iterations/${compactions[0].n}`);
    assert.equal(aCompaction.body.kind, 'compaction');
    assert.equal(aCompaction.body.reply.content[0].type, 'compaction');
    // Usage of compactions counts toward the session's totals.
    const total = recs.reduce((n, r) => n + r.usage.input_tokens, 0);
    assert.equal(done.usage.input_tokens, total);
    // (The event log is trimmed to its newest entries: its last compaction is the last record's.)
    const evs = await events(s.id);
    const lastCompleted = evs.filter((e) => e.type === 'compaction.completed').at(-1)!;
    assert.equal(lastCompleted.data.iteration, compactions.at(-1).iteration);
    assert.equal(lastCompleted.data.n, compactions.at(-1).n);
    assert.equal(lastCompleted.data.summarized_messages, compactions.at(-1).summarized_messages);
    assert.equal(lastCompleted.data.message.content[0].type, 'compaction');
  });
});

describe('sessions: compaction by the route, the policy and the API', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  async function create(body: Record<string, unknown>) {
    const r = await h.api.post('/v1/sessions', body);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  }
  const compact = (id: string, body?: unknown, headers?: Record<string, string>) =>
    h.api.post(`/v1/sessions/${id}/compact`, body, headers);
  const types = async (id: string) =>
    ((await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as Array<{ type: string }>).map(
      (e) => e.type,
    );

  test('POST …/compact while running: after the turn in flight and its tool calls, then the model goes on from the summary', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let turns = 0;
    h.fake.setHandler(async () => {
      turns++;
      if (turns === 1) {
        await gate;
        return toolCall('calculate_sum', { a: 2, b: 3 });
      }
      return text('The sum is 5.');
    });
    const s = await create({ input: 'What is 2 plus 3?', tools: ['calculate_sum'] });
    await h.fake.waitForRequests(1);
    const r = await compact(s.id, { instructions: 'Keep the numbers.' });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    assert.equal(r.body.compaction_pending, true);
    // A second one while it is scheduled: 409.
    const again = await compact(s.id);
    assert.equal(again.status, 409);
    assert.equal(again.body.error.code, 'compaction_pending');
    release();
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle');
    assert.equal(done.compaction_pending, false);
    const [turn1, compaction, turn2] = h.fake.requests;
    assert.equal(h.fake.requests.length, 3);
    assert.equal(turn1!.body.compaction, undefined);
    assert.deepEqual(compaction!.body.compaction, { type: 'summarize', instructions: 'Keep the numbers.' });
    // After that turn's tool calls: the call and its result were summarized.
    assert.deepEqual(
      compaction!.messages.map((m) => m.role),
      ['user', 'assistant', 'user'],
    );
    assert.equal((compaction!.messages[2]!.content as Array<{ type: string }>)[0]!.type, 'tool_result');
    assert.equal(turn2!.messages.length, 1);
    assert.equal((turn2!.messages[0]!.content as Array<{ type: string }>)[0]!.type, 'compaction');
    const msgs = await h.api.get(`/v1/sessions/${s.id}/messages?include=compacted`);
    assert.deepEqual(
      msgs.body.data.map((m: { role: string }) => m.role),
      ['assistant', 'assistant'],
    );
    assert.equal(msgs.body.compacted.length, 1);
    assert.equal(msgs.body.compacted[0].at_iteration, 2);
    assert.equal(msgs.body.compacted[0].messages.length, 3);
    const recs = (await h.api.get(`/v1/sessions/${s.id}/iterations`)).body.data;
    assert.deepEqual(
      recs.map((x: { kind?: string }) => x.kind ?? 'turn'),
      ['turn', 'compaction', 'turn'],
    );
    assert.equal(recs[1].summarized_messages, 3);
    const t = await types(s.id);
    assert.ok(t.indexOf('compaction.started') > t.indexOf('tool.completed'));
    assert.ok(t.indexOf('compaction.completed') > t.indexOf('compaction.started'));
  });

  test('POST …/compact while idle: at once, and the session is idle again with its stop reason; the next message is answered from the summary', async () => {
    const s = await create({ input: "What's the weather in Paris?", tools: ['get_weather'] });
    const idle = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(idle.stop_reason, 'end_turn');
    const before = h.fake.requests.length;
    const r = await compact(s.id, undefined, { 'if-match': `"${idle.revision}"` });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const after = await h.api.waitFor(s.id, (x) => x.status === 'idle' && !x.compaction_pending);
    assert.equal(after.stop_reason, 'end_turn');
    assert.equal(h.fake.requests.length, before + 1);
    assert.deepEqual(h.fake.requests.at(-1)!.body.compaction, { type: 'summarize' });
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(msgs.length, 1);
    assert.equal(msgs[0].content[0].type, 'compaction');
    assert.match(msgs[0].content[0].content, /get_weather/);
    const t = await types(s.id);
    assert.ok(t.includes('compaction.completed'));
    // The next message: the model reads the summary and the new question.
    const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'What is 2 plus 3?' });
    assert.equal(m.status, 202);
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === after.iteration + 1);
    const last = h.fake.requests.at(-1)!;
    assert.equal((last.messages[0]!.content as Array<{ type: string }>)[0]!.type, 'compaction');
    assert.equal(last.messages.at(-1)!.role, 'user');
  });

  test('POST …/compact after a PATCH of tools, with markers on 5 blocks: the request is a turn’s (base tools, tool-change beta, 4 breakpoints, container)', async () => {
    const mark = { cache_control: { type: 'ephemeral' } };
    h.fake.enqueue(text('Noted.', { container: { id: 'cnt_1' } }));
    const s = await create({
      system: [{ type: 'text', text: 'Be brief.', ...mark }],
      messages: [
        {
          role: 'user',
          content: ['a', 'b', 'c', 'd'].map((t) => ({ type: 'text', text: t, ...mark })),
        },
      ],
      tools: ['get_weather'],
    });
    await h.api.waitStatus(s.id, 'idle');
    const p = await h.api.req('PATCH', `/v1/sessions/${s.id}`, { tools: ['get_weather', 'calculate_sum'] });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    h.fake.enqueue(text('Sure.'));
    await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'And now?' });
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2);
    const r = await compact(s.id);
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const after = await h.api.waitFor(s.id, (x) => x.status !== 'running' && !x.compaction_pending);
    assert.equal(after.status, 'idle', JSON.stringify(after.error));
    const req = h.fake.requests.at(-1)!;
    assert.ok(req.body.compaction, 'the compaction request');
    assert.equal(req.status, 200);
    // Sent as a runner sends its turns: the set at create, the history's tool_addition taking it to the current one.
    assert.deepEqual(
      (req.tools as Array<{ name: string }>).map((t) => t.name),
      ['get_weather'],
    );
    assert.ok(req.messages.some((m) => m.role === 'system'));
    assert.equal(req.body.container, 'cnt_1');
  });

  test('a tool removed by PATCH stays removed after a compaction: the block carries the range’s tool changes', async () => {
    h.fake.enqueue(text('Noted.'));
    const s = await create({ input: 'Hello', tools: ['get_weather'] });
    await h.api.waitStatus(s.id, 'idle');
    assert.equal(
      (await h.api.req('PATCH', `/v1/sessions/${s.id}`, { tools: ['calculate_sum'] })).status,
      200,
    );
    h.fake.enqueue(text('Sure.'));
    await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Tools changed.' });
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2);
    assert.equal((await compact(s.id)).status, 202);
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && !x.compaction_pending);
    const summary = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data[0].content[0];
    assert.equal(summary.type, 'compaction');
    assert.deepEqual(
      summary.tool_changes.map(
        (c: { type: string; tool: { name?: string; definition?: { name: string } } }) => [
          c.type,
          c.tool.name ?? c.tool.definition?.name,
        ],
      ),
      [
        ['tool_removal', 'get_weather'],
        ['tool_addition', 'calculate_sum'],
      ],
    );
    // The model calls the removed tool anyway: it is not run.
    h.fake.enqueue(toolCall('get_weather', { location: 'Oslo' }), text('I cannot.'));
    await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Weather in Oslo?' });
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 4);
    const last = h.fake.requests.at(-1)!;
    assert.equal(last.status, 200);
    const result = (
      last.messages.at(-1)!.content as Array<{ type: string; is_error?: boolean; content: unknown }>
    )[0]!;
    assert.equal(result.type, 'tool_result');
    assert.equal(result.is_error, true);
    assert.doesNotMatch(JSON.stringify(result.content), /Simulated weather/);
  });

  test('a fork keeps the history as the model saw it at that iteration: before a compaction whole, after it from its summary', async () => {
    const s = await create({ input: "What's the weather in Paris?", tools: ['get_weather'] });
    const idle = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(idle.status, 'idle');
    const before = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.ok(before.length >= 2);
    assert.equal((await compact(s.id)).status, 202);
    const compacted = await h.api.waitFor(s.id, (x) => x.status === 'idle' && !x.compaction_pending);
    assert.equal(
      (await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'What is 2 plus 3?' })).status,
      202,
    );
    const last = await h.api.waitFor(
      s.id,
      (x) => x.status === 'idle' && x.iteration === compacted.iteration + 1,
    );

    const fork = async (at: number) => {
      const f = await h.api.post(`/v1/sessions/${s.id}/fork`, { at_iteration: at });
      assert.equal(f.status, 201, JSON.stringify(f.body));
      return (await h.api.get(`/v1/sessions/${f.body.id}/messages?include=compacted`)).body;
    };
    // Before the compaction: the whole history of that iteration, nothing compacted.
    const early = await fork(idle.iteration);
    assert.deepEqual(early.data, before);
    assert.deepEqual(early.compacted, []);
    // After it: from the summary, as the model saw it; what the summary replaced stays on the source.
    // Fork numbers records (turns and compactions): the last one is `iteration + compactions`.
    assert.equal(last.compactions, 1);
    const late = await fork(last.iteration + last.compactions);
    assert.deepEqual(
      late.data.map((m: { role: string }) => m.role),
      ['assistant', 'user', 'assistant'],
    );
    assert.equal(late.data[0].content[0].type, 'compaction');
    assert.deepEqual(late.data, (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data);
    assert.deepEqual(late.compacted, []);
    const source = (await h.api.get(`/v1/sessions/${s.id}/messages?include=compacted`)).body;
    assert.deepEqual(source.compacted[0].messages, before);
  });

  test("policy: a run's last turn that reached the threshold is compacted before the next message joins the history, which the next turn sends after the summary", async () => {
    // The SDK's runner compacts right after the final turn (`compactAfterFinalTurn`): a message pushed afterwards
    // follows the summary. Before, the next run merged the message first and summarized it away with the rest.
    h.fake.enqueue(text('The first answer.', { usage: { input_tokens: 5000, output_tokens: 10 } }));
    const s = await create({ input: 'one', compaction: { at_input_tokens: 1000 } });
    const idle = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(idle.stop_reason, 'end_turn', JSON.stringify(idle.error));
    assert.equal(h.fake.requests.length, 1, 'nothing compacted until a next turn is due');
    h.fake.enqueue(text('The second answer.'));
    const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'the new question' });
    assert.equal(m.status, 202, JSON.stringify(m.body));
    const done = await h.api.waitFor(s.id, (x) => x.status !== 'running' && x.iteration === 2);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.compactions, 1);
    assert.equal(h.fake.requests.length, 3);
    const [, compaction, turn] = h.fake.requests;
    // The compaction summarizes the history as the last run left it, without the new message.
    assert.deepEqual(compaction!.body.compaction, { type: 'summarize' });
    assert.deepEqual(
      compaction!.messages.map((x) => [x.role, textOf(x)]),
      [
        ['user', 'one'],
        ['assistant', 'The first answer.'],
      ],
    );
    // The next turn sends the summary, then the new message: the question the model answers.
    assert.equal(turn!.body.compaction, undefined);
    assert.deepEqual(
      turn!.messages.map((x) => x.role),
      ['assistant', 'user'],
    );
    assert.equal((turn!.messages[0]!.content as Array<{ type: string }>)[0]!.type, 'compaction');
    assert.equal(textOf(turn!.messages[1]!), 'the new question');
    assert.ok(String(turn!.headers['anthropic-beta'] ?? '').includes(COMPACTION_BETA));
    // The history: the summary, the question, its answer; the segment holds what the summary replaced.
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages?include=compacted`)).body;
    assert.deepEqual(
      msgs.data.map((x: BetaMessageParam) => [x.role, textOf(x)]),
      [
        ['assistant', ''],
        ['user', 'the new question'],
        ['assistant', 'The second answer.'],
      ],
    );
    assert.deepEqual(checkHistory(msgs.data), []);
    assert.equal(msgs.compacted.length, 1);
    assert.equal(msgs.compacted[0].at_iteration, 2);
    assert.deepEqual(
      msgs.compacted[0].messages.map((x: BetaMessageParam) => textOf(x)),
      ['one', 'The first answer.'],
    );
    // Records: the turn, the compaction of its two messages, the turn that answered the question.
    const recs = (await h.api.get(`/v1/sessions/${s.id}/iterations`)).body.data;
    assert.deepEqual(
      recs.map((x: { n: number; kind?: string; iteration: number }) => [x.n, x.kind ?? 'turn', x.iteration]),
      [
        [1, 'turn', 1],
        [2, 'compaction', 1],
        [3, 'turn', 2],
      ],
    );
    assert.equal(recs[1].summarized_messages, 2);
    assert.equal(recs[1].reply_index, 2);
    assert.equal(recs[2].reply_index, 4);
    assert.equal(recs[2].request.message_count, 2);
    const second = await h.api.get(`/v1/sessions/${s.id}/iterations/3`);
    assert.equal(allText(second.body.reply), 'The second answer.');
    // Events: the compaction (over the two messages) is committed before the turn that sends the question.
    const evs = (await h.api.get(`/v1/sessions/${s.id}/events?limit=1000`)).body.data as Array<{
      type: string;
      data: Record<string, unknown>;
    }>;
    const started = evs.findIndex((e) => e.type === 'compaction.started');
    assert.equal(evs[started]!.data['message_count'], 2);
    const completed = evs.findIndex((e) => e.type === 'compaction.completed');
    assert.equal(evs[completed]!.data['summarized_messages'], 2);
    const turnStarted = evs.findLastIndex((e) => e.type === 'turn.started');
    assert.ok(completed < turnStarted, 'compacted before the turn');
    assert.equal(evs[turnStarted]!.data['message_count'], 2);
    // The history was rewritten: the turn after the summary starts a new thread, whose anchor the next run continues
    // with the new message only.
    assert.deepEqual(turn!.body.thread, { type: 'create' });
    h.fake.enqueue(text('The third answer.'));
    const third = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'a third question' });
    assert.equal(third.status, 202, JSON.stringify(third.body));
    const after = await h.api.waitFor(s.id, (x) => x.status !== 'running' && x.iteration === 3);
    assert.equal(after.status, 'idle', JSON.stringify(after.error));
    assert.equal(after.compactions, 1, 'the second turn stayed under the threshold');
    const next = h.fake.requests.at(-1)!;
    assert.equal(h.fake.requests.length, 4);
    assert.deepEqual(next.body.thread, { type: 'continue', previous_message_id: turn!.replyId });
    assert.deepEqual(
      next.body.messages.map((x) => textOf(x)),
      ['a third question'],
    );
  });

  test('a compaction reply without a summary changes nothing: compaction.skipped, the history as it was', async () => {
    const s = await create({ input: 'hello there' });
    const idle = await h.api.waitStatus(s.id, ['idle', 'failed']);
    const before = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    h.fake.enqueue({ type: 'message', content: [{ type: 'compaction', content: null }] });
    assert.equal((await compact(s.id)).status, 202);
    const after = await h.api.waitFor(s.id, (x) => x.status === 'idle' && !x.compaction_pending);
    assert.equal(after.stop_reason, idle.stop_reason);
    assert.deepEqual((await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data, before);
    const msgs = await h.api.get(`/v1/sessions/${s.id}/messages?include=compacted`);
    assert.deepEqual(msgs.body.compacted, []);
    const recs = (await h.api.get(`/v1/sessions/${s.id}/iterations`)).body.data;
    assert.equal(recs.at(-1).kind, 'compaction');
    assert.equal(recs.at(-1).summarized_messages, 0);
    assert.equal(recs.at(-1).reply_index, -1);
    assert.ok((await types(s.id)).includes('compaction.skipped'));
  });

  test('POST …/compact while failed: at once, back to failed with its error; resume goes on from the summary', async () => {
    h.fake.enqueue({ type: 'error', status: 400, errorType: 'invalid_request_error', message: 'scripted' });
    const s = await create({ input: 'What is 2 plus 3?', tools: ['calculate_sum'] });
    const failed = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(failed.status, 'failed');
    const r = await compact(s.id);
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const back = await h.api.waitFor(s.id, (x) => x.status === 'failed' && !x.compaction_pending);
    assert.deepEqual(back.error, failed.error);
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(msgs.length, 1);
    const resumed = await h.api.post(`/v1/sessions/${s.id}/resume`);
    assert.equal(resumed.status, 202);
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const final = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.match(allText(final.at(-1)), /The sum is 5/);
  });

  test('`compaction` policy at create and by PATCH; `params.compaction` refused with 400 naming the route and the policy', async () => {
    const bad = await h.api.post('/v1/sessions', {
      input: 'hi',
      params: { compaction: { type: 'summarize' } },
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, 'invalid_request');
    assert.match(JSON.stringify(bad.body), /POST \/v1\/sessions\/:id\/compact/);
    assert.match(JSON.stringify(bad.body), /`compaction` policy/);
    const s = await create({ input: 'hi', start: false });
    assert.equal(s.compaction, null);
    const p = await h.api.req('PATCH', `/v1/sessions/${s.id}`, {
      params: { compaction: { type: 'summarize' } },
    });
    assert.equal(p.status, 400);
    assert.equal(p.body.error.code, 'invalid_request');
    const ok = await h.api.req('PATCH', `/v1/sessions/${s.id}`, { compaction: { at_input_tokens: 5000 } });
    assert.equal(ok.status, 200);
    assert.deepEqual(ok.body.compaction, { at_input_tokens: 5000 });
    const off = await h.api.req('PATCH', `/v1/sessions/${s.id}`, { compaction: null });
    assert.equal(off.body.compaction, null);
    // The policy with a server-side compaction edit: one or the other.
    const both = await h.api.post('/v1/sessions', {
      input: 'hi',
      compaction: { at_input_tokens: 5000 },
      params: {
        betas: [CONTEXT_COMPACTION_BETA],
        context_management: { edits: [{ type: 'compact_20260112' }] },
      },
    });
    assert.equal(both.status, 400);
  });

  test('a turn held for review (pause_after_turn) counts its server-side compaction in the session usage too', async () => {
    const s = await create({
      input: `${'Some long background. '.repeat(200)} Say hi.`,
      pause_after_turn: true,
      params: {
        betas: [CONTEXT_COMPACTION_BETA],
        context_management: {
          edits: [{ type: 'compact_20260112', trigger: { type: 'input_tokens', value: 800 } }],
        },
      },
    });
    const held = await h.api.waitStatus(s.id, ['requires_action', 'idle', 'failed']);
    assert.equal(held.status, 'requires_action', JSON.stringify(held.error));
    assert.equal(held.required_action.type, 'review_turn');
    const recs = (await h.api.get(`/v1/sessions/${s.id}/iterations`)).body.data;
    const completed = ((await h.api.get(`/v1/sessions/${s.id}/events?limit=1000`)).body.data as any[]).find(
      (e) => e.type === 'turn.completed',
    );
    assert.ok(
      completed.data.message.usage.iterations?.some((e: { type: string }) => e.type === 'compaction'),
      'the turn compacted server-side',
    );
    const sum = (k: string) => recs.reduce((n: number, r: any) => n + r.usage[k], 0);
    assert.equal(held.usage.input_tokens, sum('input_tokens'));
    assert.equal(held.usage.output_tokens, sum('output_tokens'));
  });

  test('params.context_management passes through; a reply that stops for `compaction` continues the run', async () => {
    const s = await create({
      input: `${'Some long background. '.repeat(200)} What is 2 plus 3?`,
      tools: ['calculate_sum'],
      params: {
        betas: [CONTEXT_COMPACTION_BETA],
        context_management: {
          edits: [
            {
              type: 'compact_20260112',
              trigger: { type: 'input_tokens', value: 800 },
              pause_after_compaction: true,
            },
          ],
        },
      },
    });
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.stop_reason, 'end_turn');
    assert.deepEqual(h.fake.requests[0]!.body.context_management, {
      edits: [
        {
          type: 'compact_20260112',
          trigger: { type: 'input_tokens', value: 800 },
          pause_after_compaction: true,
        },
      ],
    });
    const recs = (await h.api.get(`/v1/sessions/${s.id}/iterations`)).body.data;
    assert.equal(recs[0].stop_reason, 'compaction');
    assert.equal(recs.at(-1).stop_reason, 'end_turn');
    // The compaction is billed: the API reports its tokens in `usage.iterations` only, and the service adds them to
    // the turn's record, the session's usage and its cost.
    const log = (await h.api.get(`/v1/sessions/${s.id}/events?limit=1000`)).body.data as any[];
    const completed = log.find((e) => e.type === 'turn.completed');
    const reported = completed.data.message.usage;
    const entry = reported.iterations.find((e: { type: string }) => e.type === 'compaction');
    assert.ok(entry.input_tokens > 200, JSON.stringify(reported));
    assert.equal(recs[0].usage.input_tokens, reported.input_tokens + entry.input_tokens);
    assert.equal(recs[0].usage.output_tokens, reported.output_tokens + entry.output_tokens);
    const sum = (k: string) => recs.reduce((n: number, r: any) => n + r.usage[k], 0);
    assert.equal(done.usage.input_tokens, sum('input_tokens'));
    assert.equal(done.usage.output_tokens, sum('output_tokens'));
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.match(allText(msgs.at(-1)), /The sum is 5/);
    // The route refuses to compact what the API compacts server-side.
    const r = await compact(s.id);
    assert.equal(r.status, 400);
  });

  test('bad input: waiting for a client, unanswered tool calls, nothing to compact, a summary alone, If-Match, another tenant, bad bodies', async () => {
    // requires_action → 409.
    const waiting = await create({
      input: 'What is 2 plus 3?',
      tools: ['calculate_sum'],
      approval: 'always',
    });
    await h.api.waitStatus(waiting.id, 'requires_action');
    const r1 = await compact(waiting.id);
    assert.equal(r1.status, 409);
    assert.equal(r1.body.error.code, 'invalid_status');
    // A history ending with tool calls that have no results (a failed tool step).
    h.fake.enqueue(toolCall('evaluate_expression', { expression: '1/' }));
    const broken = await create({
      input: 'Evaluate 1/',
      tools: ['evaluate_expression'],
      on_tool_error: 'fail',
    });
    const failed = await h.api.waitStatus(broken.id, ['failed', 'idle']);
    assert.equal(failed.status, 'failed');
    const r2 = await compact(broken.id);
    assert.equal(r2.status, 409);
    assert.equal(r2.body.error.code, 'unanswered_tool_calls');
    const msgs = (await h.api.get(`/v1/sessions/${broken.id}/messages`)).body.data;
    assert.deepEqual(checkHistory(msgs), []);
    // Nothing to compact.
    const empty = await create({ start: false });
    const r3 = await compact(empty.id);
    assert.equal(r3.status, 409);
    assert.equal(r3.body.error.code, 'nothing_to_compact');
    // A summary alone is not compacted again.
    const once = await create({ input: 'hello', start: true });
    await h.api.waitStatus(once.id, 'idle');
    assert.equal((await compact(once.id)).status, 202);
    await h.api.waitFor(once.id, (x) => x.status === 'idle' && !x.compaction_pending);
    const r4 = await compact(once.id);
    assert.equal(r4.status, 409);
    assert.equal(r4.body.error.code, 'nothing_to_compact');
    // If-Match, another tenant (404 for an unknown id here), bodies.
    const r5 = await compact(once.id, {}, { 'if-match': '"1"' });
    assert.equal(r5.status, 412);
    const r6 = await compact('ses_doesnotexist000');
    assert.equal(r6.status, 404);
    const r7 = await compact(once.id, { instructions: 'x'.repeat(10_001) });
    assert.equal(r7.status, 400);
    const r8 = await compact(once.id, { instructions: 'ok', extra: 1 });
    assert.equal(r8.status, 400);
  });
});
