/**
 * The offline model covers every flow a person without a key may try: it calls client tools (any tool it has no
 * script for, with an input built from the tool's schema), answers the newest text of a turn (a follow-up merged
 * after tool results, an interrupt merged after the question it replaces), and a whole session with a client tool
 * runs through the service against it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { offlineReply } from '../../src/offline/model.js';
import type { FakeBlock, FakeRequest } from '../../src/offline/wire.js';
import { startHarness, type Harness } from '../helpers/service.js';

const SCRIPTED = ['calculate_sum', 'evaluate_expression', 'current_time', 'get_weather'].map((name) => ({
  name,
  input_schema: { type: 'object', properties: {} },
}));

const lookupOrder = {
  name: 'lookup_order',
  description: 'Find an order in the shop by its number and tell its delivery status.',
  input_schema: {
    type: 'object',
    properties: { order_id: { type: 'string' }, verbose: { type: 'boolean' } },
    required: ['order_id'],
  },
};
const sendEmail = {
  name: 'sendEmail',
  description: 'Send an email message to a customer.',
  input_schema: {
    type: 'object',
    properties: {
      to: { type: 'string' },
      priority: { type: 'string', enum: ['low', 'high'] },
      copies: { type: 'integer', minimum: 2 },
      urgent: { type: 'boolean' },
      tags: { type: 'array', items: { type: 'string' }, minItems: 2 },
      sender: {
        type: 'object',
        properties: { name: { type: 'string', default: 'shop' }, city: { type: 'string' } },
        required: ['name', 'city'],
      },
      when: { type: 'string', format: 'date' },
    },
    required: ['to', 'priority', 'copies', 'urgent', 'tags', 'sender', 'when'],
  },
};

function ask(messages: BetaMessageParam[], tools: unknown[]) {
  const request: FakeRequest = {
    body: { model: 'offline', max_tokens: 64, messages: [] },
    headers: {},
    messages,
    system: undefined,
    tools,
    stream: false,
    at: Date.now(),
  };
  return offlineReply(request);
}

const calls = (content: FakeBlock[]) =>
  content.flatMap((b) => (b.type === 'tool_use' ? [[b.name, b.input] as const] : []));
const textOf = (content: FakeBlock[]) =>
  content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join(' ');

describe('offline model: tools it has no script for', () => {
  test('calls the client tool whose name and description match the question, input from its schema', () => {
    const reply = ask([{ role: 'user', content: 'Where is my order 4711?' }], [sendEmail, lookupOrder]);
    assert.deepEqual(calls(reply.content), [['lookup_order', { order_id: '4711' }]]);
    assert.match(textOf(reply.content), /lookup_order/);
  });

  test('matches camelCase names; fills every required property with a plausible value of its type', () => {
    const reply = ask([{ role: 'user', content: 'Send an email to Bob in Paris' }], [lookupOrder, sendEmail]);
    const [first] = calls(reply.content);
    assert.ok(first);
    const [name, input] = first as readonly [string, Record<string, unknown>];
    assert.equal(name, 'sendEmail');
    assert.equal(input!['priority'], 'low', 'the first enum value');
    assert.equal(input!['copies'], 2, 'an integer within its minimum');
    assert.equal(input!['urgent'], true);
    assert.deepEqual(input!['tags'], ['Send an email to Bob in Paris', 'Send an email to Bob in Paris']);
    assert.deepEqual(input!['sender'], { name: 'shop', city: 'Paris' }, 'a default, and a place for a city');
    assert.match(String(input!['when']), /^\d{4}-\d{2}-\d{2}$/);
    assert.equal(input!['to'], 'Send an email to Bob in Paris');
    assert.deepEqual(Object.keys(input!).sort(), [...sendEmail.input_schema.required].sort());
  });

  test('a question that matches no tool calls the first one; the scripted tools keep their own answers', () => {
    const reply = ask([{ role: 'user', content: 'Hello there' }], [lookupOrder, sendEmail]);
    assert.deepEqual(calls(reply.content), [['lookup_order', { order_id: 'Hello there' }]]);
    const sum = ask([{ role: 'user', content: 'What is 2 plus 3?' }], [lookupOrder, ...SCRIPTED]);
    assert.deepEqual(calls(sum.content), [['calculate_sum', { a: 2, b: 3 }]]);
    const hello = ask([{ role: 'user', content: 'Hello there' }], SCRIPTED);
    assert.deepEqual(calls(hello.content), [], 'with scripted tools only, a greeting gets the introduction');
    assert.match(textOf(hello.content), /offline model/);
  });

  test('tools that run upstream (a typed server tool) are never called', () => {
    const reply = ask(
      [{ role: 'user', content: 'search the web for cats' }],
      [{ type: 'web_search_20250305', name: 'web_search', max_uses: 1 }],
    );
    assert.deepEqual(calls(reply.content), []);
  });

  test('the result of a client tool is summarised, and not asked for again', () => {
    const reply = ask(
      [
        { role: 'user', content: 'Where is my order 4711?' },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 't1', name: 'lookup_order', input: { order_id: '4711' } }],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'shipped' }] },
      ],
      [lookupOrder],
    );
    assert.deepEqual(reply.content, [{ type: 'text', text: 'lookup_order returned: shipped.' }]);
  });

  test('a long crafted question is read in linear time (generous bound, as in fake-bounds.test.ts)', () => {
    const N = 200_000;
    for (const content of [`lookupOrder${'A'.repeat(N)}`, `x ${'ab_'.repeat(N / 3)}`, `1${'.'.repeat(N)}2`]) {
      const t0 = performance.now();
      const reply = ask([{ role: 'user', content }], [sendEmail, lookupOrder]);
      const ms = performance.now() - t0;
      assert.equal(calls(reply.content).length, 1);
      assert.ok(ms < 8_000, `answered in ${Math.round(ms)} ms`);
    }
  });

  test('a crafted schema is filled within bounds', () => {
    let schema: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 200; i++) schema = { type: 'object', properties: { x: schema }, required: ['x'] };
    const wide = {
      type: 'object',
      properties: {},
      required: Array.from({ length: 10_000 }, (_, i) => `p${i}`),
    };
    const deep = ask([{ role: 'user', content: 'go' }], [{ name: 'deep', input_schema: schema }]);
    assert.ok(JSON.stringify(deep.content).length < 2_000);
    const many = ask([{ role: 'user', content: 'go' }], [{ name: 'wide', input_schema: wide }]);
    const input = calls(many.content)[0]![1] as Record<string, unknown>;
    assert.ok(Object.keys(input).length <= 64);
  });
});

describe('offline model: the newest text is what it answers', () => {
  const weatherCall: BetaMessageParam = {
    role: 'assistant',
    content: [{ type: 'tool_use', id: 'w1', name: 'get_weather', input: { location: 'Paris' } }],
  };
  const weatherResult = { type: 'tool_result' as const, tool_use_id: 'w1', content: 'Sunny, 21°C' };

  test('a follow-up merged after tool results is answered after the summary', () => {
    const reply = ask(
      [
        { role: 'user', content: "What's the weather in Paris?" },
        weatherCall,
        { role: 'user', content: [weatherResult, { type: 'text', text: 'Also, what is 2 plus 3?' }] },
      ],
      SCRIPTED,
    );
    assert.deepEqual(calls(reply.content), [['calculate_sum', { a: 2, b: 3 }]]);
    assert.match(textOf(reply.content), /^The weather in Paris is sunny, 21°C\. Let me add 2 and 3\.$/);
  });

  test('a follow-up no tool answers is answered in words, not only with the old summary', () => {
    const reply = ask(
      [
        { role: 'user', content: "What's the weather in Paris?" },
        weatherCall,
        { role: 'user', content: [weatherResult, { type: 'text', text: 'Who are you?' }] },
      ],
      SCRIPTED,
    );
    assert.deepEqual(calls(reply.content), []);
    const said = textOf(reply.content);
    assert.match(said, /^The weather in Paris is sunny, 21°C\. /);
    assert.match(said, /You said: "Who are you\?"/);
  });

  test('"and in Tokyo?" goes on with the tool just answered', () => {
    const reply = ask(
      [
        { role: 'user', content: "What's the weather in Paris?" },
        weatherCall,
        { role: 'user', content: [weatherResult, { type: 'text', text: 'And in Tokyo?' }] },
      ],
      SCRIPTED,
    );
    assert.deepEqual(calls(reply.content), [['get_weather', { location: 'Tokyo' }]]);
  });

  test('an interrupt merged after the question it replaces: only the newest question is answered', () => {
    const reply = ask(
      [
        {
          role: 'user',
          content: [
            { type: 'text', text: "What's the weather in Paris?" },
            { type: 'text', text: 'Actually, what time is it in Tokyo?' },
          ],
        },
      ],
      SCRIPTED,
    );
    assert.deepEqual(calls(reply.content), [['current_time', { timezone: 'Asia/Tokyo' }]]);
  });

  test('thanks after results asks nothing back', () => {
    const reply = ask(
      [
        { role: 'user', content: "What's the weather in Paris?" },
        weatherCall,
        { role: 'user', content: [weatherResult, { type: 'text', text: 'thanks!' }] },
      ],
      [...SCRIPTED, lookupOrder],
    );
    assert.deepEqual(calls(reply.content), [], 'no tool is called for a word that names none');
    assert.doesNotMatch(textOf(reply.content), /Which city/);
  });
});

describe('offline model through the service: a client tool session', () => {
  let h: Harness;
  before(async () => {
    // The fake's default handler is the offline model: every reply below is the offline model's.
    h = await startHarness();
  });
  after(async () => h?.close());

  test('asks for the client tool, takes its result, answers a follow-up sent meanwhile', async () => {
    const created = await h.api.post('/v1/sessions', {
      input: 'Where is my order 4711?',
      tools: [lookupOrder, 'calculate_sum'],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const waiting = await h.api.waitStatus(id, ['requires_action', 'idle', 'failed'], 20_000);
    assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting));
    assert.equal(waiting.required_action.type, 'submit_tool_results');
    const [pending] = waiting.required_action.tool_calls;
    assert.equal(pending.name, 'lookup_order');
    assert.deepEqual(pending.input, { order_id: '4711' });
    // A follow-up while the client works: it is merged after the results, and answered.
    const follow = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And what is 2 plus 3?' });
    assert.ok(follow.status < 300, JSON.stringify(follow.body));
    const submitted = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: pending.id, content: 'shipped yesterday' }],
    });
    assert.ok(submitted.status < 300, JSON.stringify(submitted.body));
    const done = await h.api.waitStatus(id, ['idle', 'failed', 'requires_action'], 20_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const said = JSON.stringify(history.slice(3));
    assert.match(said, /lookup_order returned: shipped yesterday/);
    assert.match(said, /The sum is 5/);
  });
});

describe('offline model through the service: the memory tool', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());

  async function run(input: string): Promise<string> {
    const created = await h.api.post('/v1/sessions', { input, tools: ['memory'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const done = await h.api.waitStatus(id, ['idle', 'failed', 'requires_action'], 20_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    return JSON.stringify(history.slice(1));
  }

  test('one session remembers, a second session of the tenant recalls it', async () => {
    const wrote = await run('Remember: my favourite colour is teal');
    assert.match(wrote, /"name":"memory"/);
    assert.match(wrote, /"command":"create"/);
    const file = await h.api.get('/v1/memory/notes.md');
    assert.equal(file.status, 200, JSON.stringify(file.body));
    assert.match(JSON.stringify(file.body), /my favourite colour is teal/);
    const recalled = await run('What do you remember about me?');
    assert.match(recalled, /"command":"view"/);
    // The second session's answer quotes the file the first one wrote.
    assert.match(recalled, /favourite colour is teal/);
  });

  test('"remember" text is read in linear time (generous bound)', () => {
    const text = `remember ${' '.repeat(200_000)}x`;
    const start = performance.now();
    const reply = ask([{ role: 'user', content: text }], [{ type: 'memory_20250818', name: 'memory' }]);
    assert.ok(performance.now() - start < 2000);
    assert.equal(reply.type, 'message');
  });
});
