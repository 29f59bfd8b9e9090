import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import type { BetaMessage, BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { z } from 'zod';
import {
  MESSAGE_THREADS_BETA,
  SERVER_SIDE_FALLBACK_BETA,
  apiError,
  hang,
  overloaded,
  parseScript,
  rateLimited,
  serverError,
  servedByFallback,
  startFakeAnthropic,
  text,
  thinking,
  toolCall,
  toolCalls,
  toolUse,
  type FakeAnthropic,
  type FakeRequest,
} from './server.js';
import { offlineReply } from '../../src/offline/model.js';

const MODEL = 'claude-fake-1';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

let fake: FakeAnthropic;

before(async () => {
  fake = await startFakeAnthropic();
});
after(async () => {
  await fake.close();
});
beforeEach(() => {
  fake.reset();
});

function client(maxRetries = 2): Anthropic {
  return new Anthropic({ apiKey: 'test', baseURL: fake.url, maxRetries });
}

function makeTools() {
  const calls: Array<{ name: string; input: unknown }> = [];
  const weather = betaZodTool({
    name: 'get_weather',
    description: 'The current weather in a city',
    inputSchema: z.object({ location: z.string() }),
    run: ({ location }) => {
      calls.push({ name: 'get_weather', input: { location } });
      return `Sunny, 21°C in ${location}`;
    },
  });
  const sum = betaZodTool({
    name: 'calculate_sum',
    description: 'Adds two numbers',
    inputSchema: z.object({ a: z.number(), b: z.number() }),
    run: ({ a, b }) => {
      calls.push({ name: 'calculate_sum', input: { a, b } });
      return String(a + b);
    },
  });
  return { calls, tools: [weather, sum] };
}

function textOf(message: BetaMessage): string {
  return message.content.map((block) => (block.type === 'text' ? block.text : '')).join('');
}

/** Roles alternate strictly, and tool results answer exactly the tool calls of the assistant message before them. */
function assertValidHistory(messages: BetaMessageParam[]): void {
  const turns = messages.filter((message) => (message.role as string) !== 'system');
  turns.forEach((message, i) =>
    assert.equal(message.role, i % 2 === 0 ? 'user' : 'assistant', `role of #${i}`),
  );
  turns.forEach((message, i) => {
    const previous = turns[i - 1];
    const calls =
      previous && Array.isArray(previous.content)
        ? previous.content.flatMap((block) => (block.type === 'tool_use' ? [block.id] : []))
        : [];
    const results = Array.isArray(message.content)
      ? message.content.flatMap((block) => (block.type === 'tool_result' ? [block.tool_use_id] : []))
      : [];
    if (message.role === 'user')
      assert.deepEqual([...results].sort(), [...calls].sort(), `tool results of #${i}`);
  });
}

function toolResultIds(message: any): string[] {
  return Array.isArray(message?.content)
    ? message.content
        .filter((block: any) => block.type === 'tool_result')
        .map((block: any) => block.tool_use_id)
    : [];
}

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(fake.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: response.status, headers: response.headers, body: (await response.json()) as any };
}

const threadHeaders = { 'anthropic-beta': MESSAGE_THREADS_BETA };

describe('tool runner against the fake', () => {
  for (const stream of [false, true]) {
    for (const threaded of [true, false]) {
      test(`two sequential calls, a parallel pair, a final text (stream=${stream}, threads=${threaded})`, async () => {
        fake.enqueue(
          toolCall('get_weather', { location: 'Paris' }),
          toolCall('calculate_sum', { a: 2, b: 3 }),
          toolCalls(
            [toolUse('get_weather', { location: 'Tokyo' }), toolUse('calculate_sum', { a: 10, b: 20 })],
            {
              preamble: 'Two at once.',
            },
          ),
          text('Paris is sunny, 2 + 3 = 5, Tokyo is sunny and 10 + 20 = 30.'),
        );
        const { calls, tools } = makeTools();
        const params = {
          model: MODEL,
          max_tokens: 1024,
          system: 'You are a test model.',
          messages: [{ role: 'user' as const, content: 'Weather and sums, please.' }],
          tools,
          max_iterations: 10,
          ...(threaded ? {} : { thread: false as const }),
        };

        let final: BetaMessage;
        let streamedText = '';
        if (stream) {
          const runner = client().beta.messages.toolRunner({ ...params, stream: true });
          for await (const messageStream of runner) {
            messageStream.on('text', (delta) => (streamedText += delta));
            await messageStream.finalMessage();
          }
          final = await runner.done();
        } else {
          const runner = client().beta.messages.toolRunner(params);
          for await (const message of runner) assert.equal(message.role, 'assistant');
          final = await runner.done();
        }

        assert.equal(textOf(final), 'Paris is sunny, 2 + 3 = 5, Tokyo is sunny and 10 + 20 = 30.');
        if (stream) assert.ok(streamedText.endsWith(textOf(final)), 'text arrived as deltas');
        assert.equal(fake.requests.length, 4);
        assert.deepEqual(calls.slice(0, 2), [
          { name: 'get_weather', input: { location: 'Paris' } },
          { name: 'calculate_sum', input: { a: 2, b: 3 } },
        ]);
        assert.deepEqual(
          calls.slice(2).sort((x, y) => x.name.localeCompare(y.name)),
          [
            { name: 'calculate_sum', input: { a: 10, b: 20 } },
            { name: 'get_weather', input: { location: 'Tokyo' } },
          ],
        );

        const requests = fake.requests;
        for (const request of requests) {
          assert.equal(request.status, 200);
          assert.equal(request.stream, stream);
          assert.equal(request.body.stream, stream);
        }
        if (threaded) {
          assert.deepEqual(requests[0]!.body.thread, { type: 'create' });
          assert.equal(requests[0]!.body.tools?.length, 2);
          assert.equal(requests[0]!.body.system, 'You are a test model.');
          for (let i = 1; i < requests.length; i++) {
            const { body, headers } = requests[i]!;
            assert.deepEqual(body.thread, {
              type: 'continue',
              previous_message_id: requests[i - 1]!.replyId,
            });
            assert.ok(String(headers['anthropic-beta']).includes(MESSAGE_THREADS_BETA));
            assert.equal(body.system, undefined);
            assert.equal(body.tools, undefined);
            assert.equal(body.messages.length, 1, 'only the new tool results');
            assert.equal(body.messages[0]?.role, 'user');
            assert.ok(toolResultIds(body.messages[0]).length > 0);
            // The fake took system and tools from the thread.
            assert.equal(requests[i]!.system, 'You are a test model.');
            assert.equal(requests[i]!.tools.length, 2);
          }
        } else {
          requests.forEach((request, i) => {
            assert.equal(request.body.thread, undefined);
            assert.equal(request.body.messages.length, 2 * i + 1, 'full history each turn');
            assert.equal(request.body.tools?.length, 2);
            assert.ok(!String(request.headers['anthropic-beta'] ?? '').includes(MESSAGE_THREADS_BETA));
          });
        }
        const seen = requests.at(-1)!.messages as BetaMessageParam[];
        assert.equal(seen.length, 7);
        assertValidHistory(seen);
        assert.deepEqual(toolResultIds(seen[6]).length, 2);
      });
    }
  }

  test('a scripted tool-loop:N handler drives N turns', async () => {
    fake.setHandler(parseScript('tool-loop:4'));
    const { calls, tools } = makeTools();
    const final = await client()
      .beta.messages.toolRunner({
        model: MODEL,
        max_tokens: 256,
        messages: [{ role: 'user', content: 'loop' }],
        tools,
        max_iterations: 10,
      })
      .runUntilDone();
    assert.equal(textOf(final), 'Finished after 4 turns.');
    assert.equal(fake.requests.length, 4);
    assert.deepEqual(
      calls.map((call) => call.input),
      [
        { a: 1, b: 1 },
        { a: 2, b: 1 },
        { a: 3, b: 1 },
      ],
    );
  });

  test('a scripted paced:TURNS:MIN:MAX:DELAY handler streams indexed, stamped deltas at its own pace', async () => {
    fake.setHandler(parseScript('paced:3:2:4:5'));
    const { calls, tools } = makeTools();
    const turns: string[][] = [];
    const runner = client().beta.messages.toolRunner({
      model: MODEL,
      max_tokens: 256,
      messages: [{ role: 'user', content: 'paced' }],
      tools,
      max_iterations: 10,
      stream: true,
    });
    for await (const stream of runner) {
      const deltas: string[] = [];
      stream.on('streamEvent', (ev) => {
        if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') deltas.push(ev.delta.text);
      });
      await stream.finalMessage();
      turns.push(deltas);
    }
    assert.equal(turns.length, 3);
    for (const deltas of turns) {
      assert.ok(deltas.length >= 2 && deltas.length <= 4, `${deltas.length} deltas`);
      assert.match(deltas[0]!, /^#0 s\d{13} y $/);
      deltas.slice(1).forEach((d, k) => assert.equal(d, `#${k + 1} x y `));
    }
    assert.deepEqual(
      calls.map((call) => call.input),
      [
        { a: 1, b: 1 },
        { a: 2, b: 1 },
      ],
    );
    assert.throws(() => parseScript('paced:3:5:4:50'), /MIN <= MAX/);
  });

  test('a paced stream keeps its own schedule: a late timer delays one event, not every event after it', async () => {
    const DELAY = 50;
    fake.setHandler(() => text('one two three four five six seven eight nine ten', { eventDelayMs: DELAY }));
    const res = await fetch(`${fake.url}/v1/messages`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-api-key': 'test-key',
        'anthropic-version': '2023-06-01',
      },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 64,
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    });
    assert.equal(res.status, 200);
    // This process (the fake's too) is busy for longer than the stream's whole schedule: every event falls due
    // while nothing runs, as on a machine whose cores are taken.
    const BLOCK = 1000;
    const t0 = performance.now();
    while (performance.now() - t0 < BLOCK);
    const blockEnd = performance.now();
    const body = await res.text();
    const ms = performance.now() - blockEnd;
    const events = body.split('\nevent: ').length;
    assert.ok(events >= 10 && events * DELAY < BLOCK, `${events} events`);
    // The overdue events leave together once the fake runs again; before, each waited DELAY after the last write
    // (here ≥ 500 ms after the block).
    assert.ok(ms < 250, `the stream ended ${ms.toFixed(0)} ms after the block`);
  });
});

describe('errors and retries', () => {
  test('429 with retry-after: 1 is retried after about a second', async () => {
    fake.enqueue(rateLimited(1), text('ok'));
    const message = await client().beta.messages.create({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(textOf(message), 'ok');
    const [first, second] = fake.requests;
    assert.equal(fake.requests.length, 2);
    assert.equal(first!.status, 429);
    assert.equal(second!.status, 200);
    assert.ok(second!.at - first!.at >= 900, `gap ${second!.at - first!.at} ms`);
  });

  test('529 with a small retry-after-ms is retried', async () => {
    fake.enqueue(overloaded({ retryAfterMs: 20 }), text('ok'));
    const message = await client().beta.messages.create({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(textOf(message), 'ok');
    assert.deepEqual(
      fake.requests.map((request) => request.status),
      [529, 200],
    );
  });

  test('500 until retries run out surfaces InternalServerError with the error envelope', async () => {
    fake.enqueue(serverError({ retryAfterMs: 10 }), serverError({ retryAfterMs: 10, message: 'boom' }));
    const error = await client(1)
      .beta.messages.create({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .then(
        () => assert.fail('should reject'),
        (e: unknown) => e,
      );
    assert.ok(error instanceof Anthropic.InternalServerError);
    assert.equal(error.status, 500);
    assert.deepEqual(error.error, { type: 'error', error: { type: 'api_error', message: 'boom' } });
    assert.equal(error.type, 'api_error');
    assert.match(String(error.requestID), /^req_fake_/);
    assert.equal(fake.requests.length, 2);
  });

  test('529 until retries run out surfaces OverloadedError', async () => {
    assert.equal(typeof Anthropic.OverloadedError, 'function');
    fake.enqueue(
      overloaded({ retryAfterMs: 5 }),
      overloaded({ retryAfterMs: 5 }),
      overloaded({ retryAfterMs: 5 }),
    );
    await assert.rejects(
      client(2).beta.messages.create({
        model: MODEL,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'hi' }],
      }),
      (error: unknown) => error instanceof Anthropic.OverloadedError && error.status === 529,
    );
    assert.equal(fake.requests.length, 3);
  });

  test('x-should-retry: false stops retries; details reach error.errorCode', async () => {
    fake.enqueue(apiError(503, 'api_error', { shouldRetry: false, details: { error_code: 'maintenance' } }));
    await assert.rejects(
      client(2).beta.messages.create({
        model: MODEL,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'hi' }],
      }),
      (error: unknown) =>
        error instanceof Anthropic.InternalServerError &&
        error.status === 503 &&
        error.errorCode === 'maintenance',
    );
    assert.equal(fake.requests.length, 1);
  });

  test('a hanging request ends with APIUserAbortError when the caller aborts', async () => {
    fake.enqueue(hang());
    const controller = new AbortController();
    const request = client().beta.messages.create(
      { model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] },
      { signal: controller.signal },
    );
    await fake.waitForRequests(1);
    controller.abort();
    await assert.rejects(request, Anthropic.APIUserAbortError);
    assert.equal(fake.requests.length, 1);
  });
});

describe('streams that break', () => {
  test('a stream cut after N events rejects finalMessage() and is not retried', async () => {
    fake.enqueue(text('one two three four five six seven eight nine ten', { cutAfterEvents: 5 }));
    const stream = client().beta.messages.stream({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    });
    let received = '';
    stream.on('text', (delta) => (received += delta));
    await assert.rejects(stream.finalMessage(), (error: unknown) => {
      assert.ok(error instanceof Anthropic.AnthropicError);
      assert.ok(!(error instanceof Anthropic.APIError), 'a body error, not an API error');
      return true;
    });
    // message_start, ping, content_block_start, then two text deltas.
    assert.equal(received, 'one two three four five six ');
    assert.equal(fake.requests.length, 1, 'the SDK does not retry once the stream has started');
  });

  test('a connection dropped before the response headers is retried, streaming or not', async () => {
    fake.enqueue(
      text('lost', { cutAfterEvents: 0 }),
      text('streamed'),
      text('lost', { cutAfterEvents: 3 }),
      text('plain'),
    );
    const stream = client().beta.messages.stream({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(await stream.finalText(), 'streamed');
    const message = await client().beta.messages.create({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(textOf(message), 'plain');
    assert.deepEqual(
      fake.requests.map((request) => request.status),
      [0, 200, 0, 200],
    );
  });

  test('in-stream `event: error` rejects with an APIError of the overloaded type, without retry', async () => {
    fake.enqueue(text('partial answer here', { streamErrorAfterEvents: 4 }));
    const stream = client().beta.messages.stream({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    });
    await assert.rejects(stream.finalMessage(), (error: unknown) => {
      assert.ok(error instanceof Anthropic.APIError);
      assert.equal(error.status, undefined);
      assert.equal(error.type, 'overloaded_error');
      assert.deepEqual(error.error, {
        type: 'error',
        error: { type: 'overloaded_error', message: 'Overloaded' },
      });
      return true;
    });
    assert.equal(fake.requests.length, 1);
  });

  test('a threaded streaming runner fails on a cut turn, and iterating again replays under a new thread', async () => {
    fake.enqueue(
      toolCall('get_weather', { location: 'Paris' }),
      text('It is sunny in Paris, as far as I can tell.', { cutAfterEvents: 4 }),
      text('It is sunny in Paris.'),
    );
    const { calls, tools } = makeTools();
    const runner = client().beta.messages.toolRunner({
      model: MODEL,
      max_tokens: 256,
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools,
      max_iterations: 10,
      stream: true,
    });
    // The loop body must not throw the stream's error itself: the runner then throws it from `next()` and stays
    // usable. (An error thrown by the loop body closes the runner for good; see the next test.)
    let bodySaw: unknown;
    await assert.rejects(async () => {
      for await (const messageStream of runner)
        await messageStream.finalMessage().catch((e: unknown) => (bodySaw = e));
    }, Anthropic.AnthropicError);
    assert.ok(bodySaw instanceof Anthropic.AnthropicError);
    assert.equal(fake.requests.length, 2);
    for await (const messageStream of runner) await messageStream.finalMessage();
    const final = await runner.done();
    assert.equal(textOf(final), 'It is sunny in Paris.');
    assert.equal(calls.length, 1, 'the tool ran once; its result was re-sent');

    const [, cut, replay] = fake.requests;
    assert.equal(cut!.body.thread?.type, 'continue');
    assert.deepEqual(replay!.body.thread, { type: 'create' });
    assert.equal(replay!.body.messages.length, 3, 'the full history');
    assert.equal(replay!.body.tools?.length, 2);
    assertValidHistory(replay!.body.messages);
    assert.deepEqual(replay!.body.messages[2], cut!.body.messages[0]);
  });

  test('a runner whose loop body threw cannot be iterated again', async () => {
    fake.enqueue(text('cut short here', { cutAfterEvents: 3 }));
    const runner = client().beta.messages.toolRunner({
      model: MODEL,
      max_tokens: 256,
      messages: [{ role: 'user', content: 'hi' }],
      tools: makeTools().tools,
      stream: true,
    });
    await assert.rejects(async () => {
      for await (const messageStream of runner) await messageStream.finalMessage();
    }, Anthropic.AnthropicError);
    await assert.rejects(async () => {
      for await (const _ of runner) assert.fail('no turn');
    }, /Cannot iterate over a consumed stream/);
    assert.equal(fake.requests.length, 1);
  });
});

describe('message threads', () => {
  test('a runner whose thread the server forgot replays the full history under a new thread', async () => {
    fake.enqueue(toolCall('get_weather', { location: 'Paris' }), text('Sunny in Paris.'));
    const { calls, tools } = makeTools();
    const runner = client().beta.messages.toolRunner({
      model: MODEL,
      max_tokens: 256,
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools,
      max_iterations: 10,
    });
    let turns = 0;
    for await (const message of runner) {
      assert.equal(message.role, 'assistant');
      if (turns++ === 0) fake.forgetThreads();
    }
    assert.equal(textOf(await runner.done()), 'Sunny in Paris.');
    assert.equal(calls.length, 1);

    const [create, lost, replay] = fake.requests;
    assert.equal(fake.requests.length, 3);
    assert.deepEqual(create!.body.thread, { type: 'create' });
    assert.deepEqual(lost!.body.thread, { type: 'continue', previous_message_id: create!.replyId });
    assert.equal(lost!.status, 404);
    assert.deepEqual(replay!.body.thread, { type: 'create' });
    assert.equal(replay!.status, 200);
    assert.equal(replay!.body.system, 'Be brief.');
    assert.equal(replay!.body.tools?.length, 2);
    assert.equal(replay!.body.messages.length, 3);
    assertValidHistory(replay!.body.messages);
    assert.deepEqual(replay!.messages, replay!.body.messages);
  });

  test('pause_turn is resumed with an empty continue; a server without threads makes the runner go unthreaded', async () => {
    fake.enqueue(text('working on it', { stop_reason: 'pause_turn' }), text('done'));
    const resumed = await client()
      .beta.messages.toolRunner({
        model: MODEL,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'go' }],
        tools: [],
      })
      .runUntilDone();
    assert.equal(textOf(resumed), 'done');
    const [, resume] = fake.requests;
    assert.equal(resume!.body.thread?.type, 'continue');
    assert.deepEqual(resume!.body.messages, []);
    assert.deepEqual(
      resume!.messages.map((message) => message.role),
      ['user', 'assistant'],
    );

    const unthreaded = await startFakeAnthropic({ threads: false });
    try {
      unthreaded.enqueue(text('plain'));
      const final = await new Anthropic({ apiKey: 'test', baseURL: unthreaded.url }).beta.messages
        .toolRunner({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'go' }], tools: [] })
        .runUntilDone();
      assert.equal(textOf(final), 'plain');
      assert.deepEqual(
        unthreaded.requests.map((request) => [request.status, request.body.thread?.type]),
        [
          [400, 'create'],
          [200, undefined],
        ],
      );
    } finally {
      await unthreaded.close();
    }
  });

  test('thread errors carry error_code details', async () => {
    const base = { model: MODEL, max_tokens: 64 };
    const unknown = await post(
      '/v1/messages',
      {
        ...base,
        messages: [{ role: 'user', content: 'x' }],
        thread: { type: 'continue', previous_message_id: 'msg_x' },
      },
      threadHeaders,
    );
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.type, 'not_found_error');
    assert.deepEqual(unknown.body.error.details, { error_code: 'thread_not_found' });

    fake.enqueue(text('first'), text('second'));
    const created = await post(
      '/v1/messages',
      { ...base, system: 'S', messages: [{ role: 'user', content: 'a' }], thread: { type: 'create' } },
      threadHeaders,
    );
    assert.equal(created.status, 200);
    const next = {
      ...base,
      messages: [{ role: 'user', content: 'b' }],
      thread: { type: 'continue', previous_message_id: created.body.id },
    };
    assert.equal((await post('/v1/messages', next, threadHeaders)).status, 200);
    assert.equal(fake.requests.at(-1)!.system, 'S');
    assert.deepEqual(
      fake.requests.at(-1)!.messages.map((message) => message.content),
      ['a', [{ type: 'text', text: 'first' }], 'b'],
    );

    const again = await post('/v1/messages', next, threadHeaders);
    assert.equal(again.status, 400);
    assert.equal(again.body.error.details.error_code, 'thread_already_continued');

    const noBeta = await post('/v1/messages', {
      ...base,
      messages: [{ role: 'user', content: 'a' }],
      thread: { type: 'create' },
    });
    assert.equal(noBeta.status, 400);
    assert.match(noBeta.body.error.message, /message-threads/);
  });

  test('a second continue while the first is in flight gets thread_continue_in_flight', async () => {
    fake.enqueue(text('first'), hang());
    const created = await post(
      '/v1/messages',
      {
        model: MODEL,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'a' }],
        thread: { type: 'create' },
      },
      threadHeaders,
    );
    const next = {
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'b' }],
      thread: { type: 'continue', previous_message_id: created.body.id },
    };
    const controller = new AbortController();
    const hanging = fetch(fake.url + '/v1/messages', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...threadHeaders },
      body: JSON.stringify(next),
      signal: controller.signal,
    }).catch(() => undefined);
    await fake.waitForRequests(2);
    const second = await post('/v1/messages', next, threadHeaders);
    assert.equal(second.body.error.details.error_code, 'thread_continue_in_flight');
    controller.abort();
    await hanging;
  });
});

describe('validation', () => {
  const invalidHistories: Array<[string, unknown[], RegExp]> = [
    [
      'unanswered tool_use followed by user text',
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'x', input: {} }] },
        { role: 'user', content: 'next' },
      ],
      /without `tool_result`.*toolu_1/,
    ],
    ['first message from the assistant', [{ role: 'assistant', content: 'hi' }], /first message/],
    [
      'tool_result for an unknown id',
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'hello' },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nope', content: 'x' }] },
      ],
      /unexpected `tool_use_id`.*toolu_nope/,
    ],
    [
      'duplicate tool_use ids',
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'x', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'x' }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'x', input: {} }] },
      ],
      /must be unique/,
    ],
    ['empty messages', [], /at least one message/],
  ];
  for (const [name, messages, pattern] of invalidHistories) {
    test(`400 invalid_request_error through the SDK: ${name}`, async () => {
      fake.enqueue(text('should not be used'));
      await assert.rejects(
        client().beta.messages.create({
          model: MODEL,
          max_tokens: 64,
          messages: messages as BetaMessageParam[],
        }),
        (error: unknown) => {
          assert.ok(error instanceof Anthropic.BadRequestError);
          assert.equal(error.type, 'invalid_request_error');
          assert.match(String(error.apiMessage), pattern);
          return true;
        },
      );
      assert.equal(fake.queued, 1, 'a rejected request consumes no scripted reply');
      assert.equal(fake.requests.length, 1, 'not retried');
    });
  }

  test('missing max_tokens and model are rejected; consecutive user messages are combined like the real API', async () => {
    const missing = await post('/v1/messages', { model: MODEL, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(missing.status, 400);
    assert.equal(missing.body.error.message, 'max_tokens: Field required');
    const noModel = await post('/v1/messages', { max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(noModel.body.error.message, 'model: Field required');

    fake.enqueue(text('fine'));
    const message = await client().beta.messages.create({
      model: MODEL,
      max_tokens: 64,
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'x', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'r' }] },
        { role: 'user', content: 'and a message pushed while the tool ran' },
      ],
    });
    assert.equal(textOf(message), 'fine');
  });

  test('fallbacks: only with their beta, a list of models or "default"; a reply a fallback served says so in its usage', async () => {
    const body = { model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'x' }] };
    const noBeta = await post('/v1/messages', { ...body, fallbacks: [{ model: 'claude-haiku-4-5' }] });
    assert.equal(noBeta.status, 400);
    assert.match(
      noBeta.body.error.message,
      new RegExp(`^fallbacks: requires .*${SERVER_SIDE_FALLBACK_BETA}`),
    );
    const beta = { 'anthropic-beta': SERVER_SIDE_FALLBACK_BETA };
    const noModel = await post('/v1/messages', { ...body, fallbacks: [{ max_tokens: 5 }] }, beta);
    assert.equal(noModel.body.error.message, 'fallbacks.0.model: Field required');

    const usage = { input_tokens: 100, output_tokens: 20 };
    fake.enqueue(
      text('Served.', servedByFallback({ model: 'claude-haiku-4-5', usage }, [{ model: MODEL, usage }])),
    );
    const stream = client().beta.messages.stream({
      ...body,
      messages: [{ role: 'user', content: 'x' }],
      fallbacks: [{ model: 'claude-haiku-4-5' }],
      betas: [SERVER_SIDE_FALLBACK_BETA],
    });
    const message = await stream.finalMessage();
    assert.equal(message.model, 'claude-haiku-4-5');
    assert.deepEqual(
      message.usage.iterations?.map((it) => [it.type, 'model' in it ? it.model : null, it.input_tokens]),
      [
        ['message', MODEL, 100],
        ['fallback_message', 'claude-haiku-4-5', 100],
      ],
    );
    assert.equal(message.usage.input_tokens, 200);
    assert.equal(message.usage.output_tokens, 40);
    assert.deepEqual(fake.requests.at(-1)?.body.fallbacks, [{ model: 'claude-haiku-4-5' }]);
  });

  test('with apiKey set, a wrong key gets 401 authentication_error', async () => {
    const guarded = await startFakeAnthropic({ apiKey: 'sk-right' });
    try {
      const params = { model: MODEL, max_tokens: 64, messages: [{ role: 'user' as const, content: 'hi' }] };
      await assert.rejects(
        new Anthropic({ apiKey: 'sk-wrong', baseURL: guarded.url }).beta.messages.create(params),
        Anthropic.AuthenticationError,
      );
      guarded.enqueue(text('welcome'));
      const message = await new Anthropic({ apiKey: 'sk-right', baseURL: guarded.url }).beta.messages.create(
        params,
      );
      assert.equal(textOf(message), 'welcome');
      assert.equal(guarded.requests[1]!.headers['authorization'], 'Bearer sk-right');
    } finally {
      await guarded.close();
    }
  });

  test('an unknown route answers a 404 error envelope', async () => {
    const response = await fetch(fake.url + '/v1/complete', { method: 'POST', body: '{}' });
    assert.equal(response.status, 404);
    assert.equal(((await response.json()) as any).error.type, 'not_found_error');
  });
});

describe('offline model', () => {
  test('weather in two cities: parallel get_weather calls, then a text naming both', async () => {
    const { calls, tools } = makeTools();
    const runner = client().beta.messages.toolRunner({
      model: MODEL,
      max_tokens: 512,
      messages: [{ role: 'user', content: "What's the weather in Paris and Tokyo?" }],
      tools,
      max_iterations: 5,
      stream: true,
    });
    for await (const messageStream of runner) await messageStream.finalMessage();
    const final = await runner.done();
    assert.equal(fake.requests.length, 2);
    assert.deepEqual(calls, [
      { name: 'get_weather', input: { location: 'Paris' } },
      { name: 'get_weather', input: { location: 'Tokyo' } },
    ]);
    assert.equal(
      textOf(final),
      'The weather in Paris is sunny, 21°C in Paris. The weather in Tokyo is sunny, 21°C in Tokyo.',
    );
  });

  function ask(content: string, tools: string[], extra: Partial<FakeRequest> = {}) {
    const request: FakeRequest = {
      body: { model: MODEL, max_tokens: 64, messages: [] },
      headers: {},
      messages: [{ role: 'user', content }],
      system: undefined,
      tools: tools.map((name) => ({ name, input_schema: { type: 'object', properties: {} } })),
      stream: false,
      at: Date.now(),
      ...extra,
    };
    return offlineReply(request);
  }

  test('sums, expressions, time zones and the friendly fallback', () => {
    const all = ['calculate_sum', 'evaluate_expression', 'current_time', 'get_weather'];
    assert.deepEqual(ask('Please add 2 and 3', all).content.at(-1), {
      type: 'tool_use',
      name: 'calculate_sum',
      input: { a: 2, b: 3 },
    });
    assert.deepEqual(ask('what is 2*(3+4)?', all).content.at(-1), {
      type: 'tool_use',
      name: 'evaluate_expression',
      input: { expression: '2*(3+4)' },
    });
    assert.deepEqual(ask('What time is it in Tokyo?', all).content.at(-1), {
      type: 'tool_use',
      name: 'current_time',
      input: { timezone: 'Asia/Tokyo' },
    });
    assert.deepEqual(ask('What time is it in Europe/Paris?', all).content.at(-1), {
      type: 'tool_use',
      name: 'current_time',
      input: { timezone: 'Europe/Paris' },
    });
    // Without the tool, no call.
    const noTools = ask("What's the weather in Paris?", []);
    assert.equal(noTools.content.length, 1);
    assert.match((noTools.content[0] as { text: string }).text, /offline model/);
    const hello = ask('Hello there', all);
    assert.match((hello.content[0] as { text: string }).text, /offline model[\s\S]*get_weather/);
    // Tool results are summarised.
    const summary = ask('', all, {
      messages: [
        { role: 'user', content: 'add 2 and 3' },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 't1', name: 'calculate_sum', input: { a: 2, b: 3 } }],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: '5' }] },
      ],
    });
    assert.deepEqual(summary.content, [{ type: 'text', text: 'The sum is 5.' }]);
  });
});

describe('wire format and pacing', () => {
  test('raw SSE: event lines, message_start with empty content, ping, chunked deltas, thinking, message_delta usage', async () => {
    fake.enqueue({
      type: 'message',
      content: [thinking('Let me think about this.'), toolUse('get_weather', { location: 'Paris' })],
    });
    const response = await fetch(fake.url + '/v1/messages', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 64,
        stream: true,
        messages: [{ role: 'user', content: 'x' }],
      }),
    });
    assert.match(String(response.headers.get('content-type')), /^text\/event-stream/);
    assert.match(String(response.headers.get('request-id')), /^req_fake_/);
    const raw = await response.text();
    const events = raw
      .split('\n\n')
      .filter(Boolean)
      .map((chunk) => {
        const [eventLine, dataLine] = chunk.split('\n');
        assert.match(String(eventLine), /^event: \w+$/);
        const data = JSON.parse(String(dataLine).replace(/^data: /, ''));
        assert.equal(data.type, String(eventLine).slice('event: '.length));
        return data;
      });
    const types = events.map((event) => event.type);
    assert.deepEqual(types.slice(0, 3), ['message_start', 'ping', 'content_block_start']);
    assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
    const start = events[0].message;
    assert.deepEqual(start.content, []);
    assert.equal(start.stop_reason, null);
    assert.equal(start.usage.output_tokens, 1);
    assert.ok(start.usage.input_tokens > 0);
    assert.match(start.id, /^msg_fake_/);
    assert.equal(start.model, MODEL);
    const deltas = events
      .filter((event) => event.type === 'content_block_delta')
      .map((event) => event.delta.type);
    assert.ok(deltas.filter((type) => type === 'thinking_delta').length >= 2);
    assert.equal(deltas.filter((type) => type === 'signature_delta').length, 1);
    const json = events
      .filter((event) => event.delta?.type === 'input_json_delta')
      .map((e) => e.delta.partial_json);
    assert.ok(json.length >= 2);
    assert.deepEqual(JSON.parse(json.join('')), { location: 'Paris' });
    const toolStart = events.find((event) => event.content_block?.type === 'tool_use');
    assert.match(toolStart.content_block.id, /^toolu_/);
    const messageDelta = events.at(-2);
    assert.deepEqual(messageDelta.delta, { stop_reason: 'tool_use', stop_sequence: null });
    assert.ok(messageDelta.usage.output_tokens > 0);
  });

  test('with eventDelayMs 20 a streamed reply of K events takes at least K * 20 ms', async () => {
    fake.setPacing(20);
    fake.enqueue(text('one two three four five six seven eight nine'));
    let streamEvents = 0;
    const started = Date.now();
    const stream = client().beta.messages.stream({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    });
    stream.on('streamEvent', () => streamEvents++);
    const message = await stream.finalMessage();
    const elapsed = Date.now() - started;
    assert.equal(textOf(message), 'one two three four five six seven eight nine');
    // message_start, content_block_start, 3 deltas, content_block_stop, message_delta, message_stop (+ ping, unseen).
    assert.equal(streamEvents, 8);
    const k = streamEvents + 1;
    assert.ok(elapsed >= k * 20, `elapsed ${elapsed} ms for ${k} events`);
  });

  test('pauseAfterEvents holds a paced stream after that many events until resume(), then sends the rest', async () => {
    fake.enqueue(
      text('one two three four five six seven eight nine', { eventDelayMs: 5, pauseAfterEvents: 4 }),
    );
    const seen: string[] = [];
    let resumed = false;
    let early = 0;
    let reached: () => void = () => {};
    const held = new Promise<void>((resolve) => (reached = resolve));
    const stream = client().beta.messages.stream({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    });
    stream.on('streamEvent', (event) => {
      seen.push(event.type);
      if (seen.length > 3 && !resumed) early++;
      // The 4th event sent is the 3rd seen (the `ping` is not): message_start, content_block_start, a delta.
      if (seen.length === 3) reached();
    });
    const done = stream.finalMessage();
    await held;
    assert.equal(fake.held, 1, 'the stream is held');
    assert.deepEqual(seen, ['message_start', 'content_block_start', 'content_block_delta']);
    resumed = true;
    fake.resume();
    assert.equal(fake.held, 0);
    const message = await done;
    assert.equal(textOf(message), 'one two three four five six seven eight nine');
    assert.equal(seen.length, 8);
    assert.equal(early, 0, 'nothing after the 4th event before resume()');
  });
});

describe('standalone process', () => {
  test('prints its url, answers, and is scriptable over /_fake/*', async () => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/fake/main.ts', '--port', '0', '--event-delay-ms', '0'],
      {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    try {
      const lines = createInterface({ input: child.stdout! });
      const [line] = (await once(lines, 'line')) as [string];
      const { url } = JSON.parse(line) as { url: string };
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);

      const enqueued = await fetch(`${url}/_fake/enqueue`, {
        method: 'POST',
        body: JSON.stringify([text('scripted from outside')]),
      });
      assert.equal(((await enqueued.json()) as any).queued, 1);

      const remote = new Anthropic({ apiKey: 'test', baseURL: url, maxRetries: 0 });
      const scripted = await remote.beta.messages.create({
        model: MODEL,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'hi' }],
      });
      assert.equal(textOf(scripted), 'scripted from outside');
      const offline = await remote.beta.messages.create({
        model: MODEL,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'hello' }],
      });
      assert.match(textOf(offline), /offline model/);

      const requests = (await (await fetch(`${url}/_fake/requests`)).json()) as FakeRequest[];
      assert.equal(requests.length, 2);
      assert.equal(requests[1]!.messages[0]?.content, 'hello');
      await fetch(`${url}/_fake/reset`, { method: 'POST' });
      assert.equal(((await (await fetch(`${url}/_fake/requests`)).json()) as unknown[]).length, 0);
    } finally {
      child.kill('SIGTERM');
    }
    const [code] = await once(child, 'exit');
    assert.equal(code, 0);
  });
});
