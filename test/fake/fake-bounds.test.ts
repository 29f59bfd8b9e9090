/**
 * The fake Messages API and its offline model under hostile input: crafted text that used to make hand-written
 * regular expressions backtrack (quadratic time: 40,000 dots stalled the process for seconds), bodies over the size
 * limit, and requests that never finish arriving.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { once } from 'node:events';
import { startFakeAnthropic, text, type FakeAnthropic } from './server.js';

const N = 200_000;
/**
 * Generous: the linear code answers each crafted request in well under a second on a busy machine; the quadratic
 * code it replaced took about 0.5 s for 20,000 characters, so about 50 s for 200,000.
 */
const BOUND_MS = 8_000;

const TOOLS = ['get_weather', 'calculate_sum', 'evaluate_expression', 'current_time'].map((name) => ({
  name,
  description: name,
  input_schema: { type: 'object', properties: {} },
}));

let fake: FakeAnthropic;
before(async () => {
  fake = await startFakeAnthropic({ record: false });
});
after(async () => {
  await fake.close();
});

async function post(body: unknown): Promise<{ status: number; json: unknown; text: string; ms: number }> {
  const start = performance.now();
  const response = await fetch(`${fake.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const raw = await response.text();
  const ms = performance.now() - start;
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    json = undefined;
  }
  return { status: response.status, json, text: raw, ms };
}

function ask(content: unknown[] | string, history: unknown[] = [], stream = false) {
  return post({
    model: 'offline',
    max_tokens: 64,
    stream,
    tools: TOOLS,
    messages: [...history, { role: 'user', content }],
  });
}

describe('offline model: crafted text is answered in linear time', () => {
  const cases: Array<[string, string]> = [
    ['trailing dots after an expression', `1${'.'.repeat(N)}2`],
    ['dots then an operator', `1+${'.'.repeat(N)}x`],
    ['white space inside a place list', `weather in A${' '.repeat(N)}B`],
    ['apostrophes ending a place', `weather in A${"'".repeat(N)}x`],
    ['a run of "in"', `weather time ${'in '.repeat(N / 3)}`],
    ['a long zone-like word', `time ${'Ab_'.repeat(N / 3)}`],
    ['many places', `weather in ${'A, '.repeat(N / 3)}x`],
  ];
  for (const [name, content] of cases) {
    test(`${name} (${content.length} characters)`, async () => {
      const reply = await ask(content);
      assert.equal(reply.status, 200, reply.text.slice(0, 300));
      assert.ok(reply.ms < BOUND_MS, `answered in ${Math.round(reply.ms)} ms`);
    });
  }

  test('a tool result of dots is summarised in linear time', async () => {
    const reply = await ask(
      [{ type: 'tool_result', tool_use_id: 'toolu_1', content: `a${'.'.repeat(N)}b ...` }],
      [
        { role: 'user', content: 'add 2 and 3' },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'toolu_1', name: 'calculate_sum', input: {} }],
        },
      ],
    );
    assert.equal(reply.status, 200, reply.text.slice(0, 300));
    assert.ok(reply.ms < BOUND_MS, `answered in ${Math.round(reply.ms)} ms`);
    const content = (reply.json as { content: Array<{ text?: string }> }).content;
    assert.ok(content[0]?.text?.endsWith('b.'), 'the trailing " ..." is dropped, the dots inside kept');
  });

  test('a scripted reply of white space streams in linear time', async () => {
    fake.enqueue(text(' '.repeat(N)));
    const reply = await ask('hello', [], true);
    assert.equal(reply.status, 200);
    assert.ok(reply.ms < BOUND_MS, `answered in ${Math.round(reply.ms)} ms`);
    assert.match(reply.text, /event: message_stop/);
  });

  test('the model still reads ordinary text', async () => {
    const reply = await ask(
      "What's the weather in Paris, and Tokyo? And what is 2*(3+4)? The time, Europe/Rome.",
    );
    const calls = (reply.json as { content: Array<{ type: string; name?: string; input?: unknown }> }).content
      .filter((block) => block.type === 'tool_use')
      .map((block) => [block.name, block.input]);
    assert.deepEqual(calls, [
      ['get_weather', { location: 'Paris' }],
      ['get_weather', { location: 'Tokyo' }],
      ['current_time', { timezone: 'Europe/Rome' }],
      ['evaluate_expression', { expression: '2*(3+4)' }],
    ]);
  });
});

describe('fake HTTP server bounds', () => {
  test('a body over maxBodyBytes is answered 413 request_too_large, declared or chunked, and the fake keeps serving', async () => {
    const small = await startFakeAnthropic({ record: false, maxBodyBytes: 10_000 });
    try {
      const big = JSON.stringify({
        model: 'm',
        max_tokens: 1,
        messages: [{ role: 'user', content: 'x'.repeat(20_000) }],
      });
      const declared = await fetch(`${small.url}/v1/messages`, { method: 'POST', body: big });
      assert.equal(declared.status, 413);
      assert.equal(((await declared.json()) as { error: { type: string } }).error.type, 'request_too_large');

      // Chunked, no content-length: counted as it arrives.
      const { port } = new URL(small.url);
      const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/messages' }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (body += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.on('error', reject);
        for (let i = 0; i < 4; i++) req.write('x'.repeat(4_000));
        req.end();
      });
      assert.equal(chunked.status, 413);
      assert.match(chunked.body, /request_too_large/);

      const ok = await fetch(`${small.url}/v1/messages`, {
        method: 'POST',
        body: JSON.stringify({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
      });
      assert.equal(ok.status, 200);
    } finally {
      await small.close();
    }
  });

  test('a request that never finishes arriving is answered 408 and closed after requestTimeoutMs', async () => {
    const slow = await startFakeAnthropic({ record: false, requestTimeoutMs: 500 });
    try {
      const socket = net.connect(Number(new URL(slow.url).port), '127.0.0.1');
      await once(socket, 'connect');
      let received = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => (received += chunk));
      socket.write(
        'POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"mo',
      );
      const closed = once(socket, 'close');
      const guard = AbortSignal.timeout(20_000);
      await Promise.race([
        closed,
        once(guard, 'abort').then(() => assert.fail('the slow request was never timed out')),
      ]);
      assert.match(received, /^HTTP\/1\.1 408/);
    } finally {
      await slow.close();
    }
  });
});
