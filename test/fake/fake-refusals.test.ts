/**
 * The fake refuses what the Messages API refuses inside content blocks and in `tool_choice`: empty text blocks (in
 * messages, nested tool results and `system`), images and PDFs with malformed base64 or a URL that is not https, an
 * image media type the API does not take, and a `tool_choice` of the wrong shape or naming no available tool. Each is
 * a 400 `invalid_request_error`, and a scripted reply stays queued.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startFakeAnthropic, text, type FakeAnthropic } from './server.js';
import { INLINE_TOOLS_BETA } from './tool-changes.js';

const MODEL = 'claude-fake-1';
const weather = { name: 'get_weather', input_schema: { type: 'object', properties: {} } };
const sum = { name: 'calculate_sum', input_schema: { type: 'object', properties: {} } };

let fake: FakeAnthropic;
before(async () => {
  fake = await startFakeAnthropic();
});
after(async () => fake.close());
beforeEach(() => fake.reset());

async function create(body: Record<string, unknown>, headers: Record<string, string> = {}) {
  const response = await fetch(`${fake.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'test', ...headers },
    body: JSON.stringify({ model: MODEL, max_tokens: 64, ...body }),
  });
  return { status: response.status, body: (await response.json()) as any };
}

const user = (content: unknown) => ({ role: 'user', content });
const image = (source: unknown) => ({ type: 'image', source });
const pdf = (source: unknown) => ({ type: 'document', source });

describe('the fake refuses blocks the API refuses', () => {
  const refused: Array<[string, Record<string, unknown>, RegExp]> = [
    [
      'an empty text block',
      { messages: [user([{ type: 'text', text: '' }])] },
      /text content blocks must be non-empty/,
    ],
    [
      'an empty text block after another block',
      {
        messages: [
          user([
            { type: 'text', text: 'hi' },
            { type: 'text', text: '' },
          ]),
        ],
      },
      /text content blocks must be non-empty/,
    ],
    [
      "a user turn's text of whitespace only (a string)",
      { messages: [user(' \n\t ')] },
      /^messages: text content blocks must contain non-whitespace text$/,
    ],
    [
      "a user turn's text block of whitespace only",
      {
        messages: [
          user([
            { type: 'text', text: 'hi' },
            { type: 'text', text: '  ' },
          ]),
        ],
      },
      /^messages: text content blocks must contain non-whitespace text$/,
    ],
    [
      'a text block of whitespace only in an assistant turn',
      {
        messages: [
          user('hi'),
          { role: 'assistant', content: [{ type: 'text', text: '\n\n' }] },
          user('again'),
        ],
      },
      /^messages: text content blocks must contain non-whitespace text$/,
    ],
    [
      'an empty text block in an assistant turn',
      { messages: [user('hi'), { role: 'assistant', content: [{ type: 'text', text: '' }] }, user('again')] },
      /text content blocks must be non-empty/,
    ],
    [
      'an empty text block in a tool result',
      {
        tools: [weather],
        messages: [
          user('hi'),
          {
            role: 'assistant',
            content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} }],
          },
          user([{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: '' }] }]),
        ],
      },
      /text content blocks must be non-empty/,
    ],
    [
      'an empty system text block',
      { system: [{ type: 'text', text: '' }], messages: [user('hi')] },
      /^system: text content blocks must be non-empty$/,
    ],
    [
      'image data that is not base64',
      { messages: [user([image({ type: 'base64', media_type: 'image/png', data: '!!!' })])] },
      /messages\.0\.content\.0\.image\.source\.base64\.data: .*not valid base64/,
    ],
    [
      'image data with a bad length',
      { messages: [user([image({ type: 'base64', media_type: 'image/png', data: 'AAAAA' })])] },
      /not valid base64/,
    ],
    [
      'image data with misplaced padding',
      { messages: [user([image({ type: 'base64', media_type: 'image/png', data: 'AB=C' })])] },
      /not valid base64/,
    ],
    [
      'an image media type the API does not take',
      { messages: [user([image({ type: 'base64', media_type: 'image/bmp', data: 'AAAA' })])] },
      /media_type: Input should be 'image\/jpeg'/,
    ],
    [
      'an image URL over http',
      { messages: [user([image({ type: 'url', url: 'http://example.com/a.png' })])] },
      /source\.url\.url: Only https URLs/,
    ],
    [
      'an image file: URL',
      { messages: [user([image({ type: 'url', url: 'file:///etc/passwd' })])] },
      /Only https URLs/,
    ],
    [
      'a PDF whose data is not base64',
      { messages: [user([pdf({ type: 'base64', media_type: 'application/pdf', data: '%PDF-1.4' })])] },
      /not valid base64/,
    ],
    [
      'a PDF by a javascript: URL',
      { messages: [user([pdf({ type: 'url', url: 'javascript:alert(1)' })])] },
      /Only https URLs/,
    ],
    ['a text document without its data', { messages: [user([pdf({ type: 'text' })])] }, /text\.media_type/],
    [
      'a file document without file_id',
      { messages: [user([pdf({ type: 'file' })])] },
      /file_id: Field required/,
    ],
    ...(['', []] as const).map((content): [string, Record<string, unknown>, RegExp] => [
      `an is_error tool result with ${JSON.stringify(content)} for content`,
      {
        messages: [
          user('hi'),
          {
            role: 'assistant',
            content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} }],
          },
          user([{ type: 'tool_result', tool_use_id: 'toolu_1', content, is_error: true }]),
        ],
        tools: [{ name: 'get_weather', input_schema: { type: 'object' } }],
      },
      /^messages\.2\.content\.0: content cannot be empty if `is_error` is true$/,
    ]),
    [
      'a citation of no known kind',
      {
        messages: [
          user('hi'),
          { role: 'assistant', content: [{ type: 'text', text: 'see', citations: [{ type: 'bogus' }] }] },
          user('ok'),
        ],
      },
      /not a citation type/,
    ],
  ];
  for (const [name, body, pattern] of refused) {
    test(`400 invalid_request_error: ${name}`, async () => {
      fake.enqueue(text('should not be used'));
      const r = await create(body);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(r.body.type, 'error');
      assert.equal(r.body.error.type, 'invalid_request_error');
      assert.match(r.body.error.message, pattern);
      assert.equal(fake.queued, 1, 'a refused request consumes no scripted reply');
    });
  }

  test('well-formed blocks pass: base64 and https images, a PDF, text, a string system', async () => {
    fake.enqueue(text('fine'));
    const r = await create({
      system: 'be brief',
      messages: [
        user([
          { type: 'text', text: 'look' },
          image({ type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' }),
          image({ type: 'url', url: 'https://example.com/a.png' }),
          pdf({ type: 'base64', media_type: 'application/pdf', data: 'JVBERi0xLjQ=' }),
        ]),
      ],
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  });
});

describe('the fake checks tool_choice against the tools', () => {
  const refused: Array<[string, Record<string, unknown>, RegExp, Record<string, string>?]> = [
    [
      'tool without a name',
      { tools: [weather], tool_choice: { type: 'tool' } },
      /tool_choice\.tool\.name: Field required/,
    ],
    [
      'tool naming no tool',
      { tools: [weather], tool_choice: { type: 'tool', name: 'nope' } },
      /Tool 'nope' not found/,
    ],
    ['any without tools', { tool_choice: { type: 'any' } }, /may only be specified while providing tools/],
    ['tool without tools', { tool_choice: { type: 'tool', name: 'get_weather' } }, /providing tools/],
    [
      'an unknown type',
      { tools: [weather], tool_choice: { type: 'some' } },
      /does not match any of the expected tags/,
    ],
    [
      'an unknown field',
      { tools: [weather], tool_choice: { type: 'auto', parallel: false } },
      /tool_choice\.auto\.parallel: Extra inputs are not permitted/,
    ],
    [
      'disable_parallel_tool_use on none',
      { tools: [weather], tool_choice: { type: 'none', disable_parallel_tool_use: true } },
      /Extra inputs are not permitted/,
    ],
    [
      'disable_parallel_tool_use not a boolean',
      { tools: [weather], tool_choice: { type: 'any', disable_parallel_tool_use: 'yes' } },
      /disable_parallel_tool_use: Input should be a valid boolean/,
    ],
    [
      'tool naming a tool removed by a tool_removal',
      {
        tools: [weather, sum],
        tool_choice: { type: 'tool', name: 'get_weather' },
        messages: [
          {
            role: 'system',
            content: [{ type: 'tool_removal', tool: { type: 'tool_reference', name: 'get_weather' } }],
          },
          user('hi'),
        ],
      },
      /Tool 'get_weather' not found/,
      { 'anthropic-beta': INLINE_TOOLS_BETA },
    ],
    [
      'any after every tool was removed',
      {
        tools: [weather],
        tool_choice: { type: 'any' },
        messages: [
          {
            role: 'system',
            content: [{ type: 'tool_removal', tool: { type: 'tool_reference', name: 'get_weather' } }],
          },
          user('hi'),
        ],
      },
      /providing tools/,
      { 'anthropic-beta': INLINE_TOOLS_BETA },
    ],
  ];
  for (const [name, body, pattern, headers] of refused) {
    test(`400 invalid_request_error: ${name}`, async () => {
      fake.enqueue(text('should not be used'));
      const r = await create({ messages: [user('hi')], ...body }, headers);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(r.body.error.type, 'invalid_request_error');
      assert.match(r.body.error.message, pattern);
      assert.equal(fake.queued, 1);
    });
  }

  const accepted: Array<[string, Record<string, unknown>, Record<string, string>?]> = [
    ['auto without tools', { tool_choice: { type: 'auto' } }],
    ['none without tools', { tool_choice: { type: 'none' } }],
    [
      'auto with disable_parallel_tool_use',
      { tools: [weather], tool_choice: { type: 'auto', disable_parallel_tool_use: true } },
    ],
    ['any with tools', { tools: [weather], tool_choice: { type: 'any', disable_parallel_tool_use: false } }],
    ['tool naming a tool', { tools: [weather, sum], tool_choice: { type: 'tool', name: 'calculate_sum' } }],
    [
      'tool naming a tool added by a tool_addition',
      {
        tools: [weather],
        tool_choice: { type: 'tool', name: 'calculate_sum' },
        messages: [
          {
            role: 'system',
            content: [{ type: 'tool_addition', tool: { type: 'tool_definition', definition: sum } }],
          },
          user('hi'),
        ],
      },
      { 'anthropic-beta': INLINE_TOOLS_BETA },
    ],
  ];
  for (const [name, body, headers] of accepted) {
    test(`accepted: ${name}`, async () => {
      fake.enqueue(text('fine'));
      const r = await create({ messages: [user('hi')], ...body }, headers);
      assert.equal(r.status, 200, JSON.stringify(r.body));
    });
  }
});
