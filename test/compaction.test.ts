/**
 * Compaction (contract §6.1): the fake Messages API answers compaction requests and server-side compaction as the API
 * does, the SDK runner's own `compactBeforeNextTurn()` drives it, and the service compacts sessions through it —
 * by the route (while running: after that turn's tools; while idle: at once) and by the `compaction` policy — keeping
 * every message it summarizes (`?include=compacted`).
 */
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
} from '../src/fake/server.js';
import { offlineReply } from '../src/fake/offline.js';
import { readSummary, signSummary } from '../src/fake/compaction.js';

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
