/**
 * Client tools with `"validate": true` (spec §7.1): the model's input is checked against `input_schema` before the
 * session waits; an invalid one is answered at once with the violations as `betaZodTool` words them.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod/v4';
import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { runRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';

const fetchPage = {
  name: 'fetch_page',
  description: 'Fetch a page.',
  input_schema: {
    type: 'object',
    properties: { url: { type: 'string' } },
    required: ['url'],
    additionalProperties: false,
  },
  validate: true,
};

/** What the SDK's own runner answers for this input with the same tool as a `betaZodTool`. */
async function zodAnswer(input: unknown): Promise<{ content: unknown; isError: boolean }> {
  const tool = betaZodTool({
    name: 'fetch_page',
    description: 'Fetch a page.',
    inputSchema: z.strictObject({ url: z.string() }),
    run: () => 'fetched',
  });
  const toolUse = { type: 'tool_use' as const, id: 'x', name: 'fetch_page', input };
  return runRunnableTool(tool, input, { toolUse, toolUseBlock: toolUse });
}

async function events(api: Api, id: string): Promise<Array<{ type: string; data: any }>> {
  const r = await api.get(`/v1/sessions/${id}/events?limit=1000`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data;
}

describe('client tool validation', { timeout: 120_000 }, () => {
  let h: Harness;
  let api: Api;
  let apiB: Api;

  before(async () => {
    h = await startHarness({
      env: { API_KEYS: 'a:key-a,b:key-b', TEST_LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'silent' },
    });
    api = h.api;
    apiB = h.api.as('key-b');
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('an invalid input is answered at once as betaZodTool would; the run goes on, no requires_action', async () => {
    h.fake.enqueue(toolCall('fetch_page', { url: 5, extra: true }, { id: 'toolu_bad' }), text('Sorry.'));
    const created = await api.post('/v1/sessions', { input: 'fetch', tools: [fetchPage] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    const done = await api.waitStatus(id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));

    const sentTool = (h.fake.requests[0]!.body.tools as any[]).find((t) => t.name === 'fetch_page');
    assert.ok(sentTool, 'the tool is offered');
    assert.equal('validate' in sentTool, false, 'the flag is not sent to the Messages API');
    const last = h.fake.requests[1]!.messages.at(-1) as any;
    const result = last.content.find((b: any) => b.type === 'tool_result');
    assert.equal(result.tool_use_id, 'toolu_bad');
    assert.equal(result.is_error, true);
    const expected = await zodAnswer({ url: 5, extra: true });
    assert.equal(expected.isError, true);
    assert.equal(result.content, expected.content, 'the same text betaZodTool gives');
    assert.match(result.content, /"path": \[\s*"url"\s*\]/);
    assert.match(result.content, /Unrecognized key: \\"extra\\"/);

    const evs = await events(api, id);
    assert.ok(!evs.some((e) => e.type === 'session.status' && e.data.status === 'requires_action'));
    const completed = evs.find((e) => e.type === 'tool.completed' && e.data.tool_use_id === 'toolu_bad');
    assert.equal(completed?.data.is_error, true);
  });

  it('a valid input waits for the client as usual; beside an invalid call, only the valid one is asked for', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('fetch_page', { url: 'https://example.com' }, 'toolu_ok'),
        toolUse('fetch_page', {}, 'toolu_missing'),
      ]),
      text('Done.'),
    );
    const created = await api.post('/v1/sessions', { input: 'fetch', tools: [fetchPage] });
    const id = created.body.id;
    const s = await api.waitStatus(id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.deepEqual(
      s.required_action.tool_calls.map((c: any) => c.id),
      ['toolu_ok'],
      'the invalid call is answered, not asked for',
    );
    assert.deepEqual(
      s.required_action.tool_results.map((r: any) => [r.tool_use_id, r.is_error]),
      [['toolu_missing', true]],
    );
    const put = await api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_ok`, { content: 'the page' });
    assert.ok(put.status === 200 || put.status === 202, JSON.stringify(put.body));
    const done = await api.waitStatus(id, ['idle', 'failed'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const results = (h.fake.requests[1]!.messages.at(-1) as any).content.filter(
      (b: any) => b.type === 'tool_result',
    );
    const missing = results.find((b: any) => b.tool_use_id === 'toolu_missing');
    assert.equal(missing.is_error, true);
    assert.equal(missing.content, (await zodAnswer({})).content);
    assert.equal(results.find((b: any) => b.tool_use_id === 'toolu_ok').content, 'the page');
  });

  it('patterns run on RE2: a backtracking pattern answers at once, lookarounds are refused; big schemas are refused', async () => {
    const rx = {
      name: 'rx',
      input_schema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } },
      validate: true,
    };
    // 60 a's and a "!": a backtracking engine tries ~2^60 ways to match before it fails (the loop would stop for
    // years); RE2 is linear. The call is answered as invalid, and the run goes on.
    h.fake.enqueue(toolCall('rx', { s: `${'a'.repeat(60)}!` }, { id: 'toolu_rx' }), text('ok'));
    const created = await api.post('/v1/sessions', { input: 'x', tools: [rx] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const result = (h.fake.requests[1]!.messages.at(-1) as any).content[0];
    assert.equal(result.is_error, true);
    assert.match(result.content, /"path": \[\s*"s"\s*\]/);

    const lookahead = {
      ...rx,
      input_schema: { type: 'object', properties: { s: { type: 'string', pattern: '^(?=a)a+$' } } },
    };
    const refused = await api.post('/v1/sessions', { input: 'x', tools: [lookahead], start: false });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.match(refused.body.error.message, /cannot be compiled/);

    // Linear is not cheap: a pattern's program times the input's length. Counted repetitions past 100 are refused
    // (three groups of {0,1000} over a 10,000-character input took 6.9 s of the loop).
    const costly = {
      ...rx,
      input_schema: {
        type: 'object',
        properties: { s: { type: 'string', pattern: '(?:[\\p{L}\\p{N}]{0,1000}){3}$' } },
      },
    };
    const costlyRefused = await api.post('/v1/sessions', { input: 'x', tools: [costly], start: false });
    assert.equal(costlyRefused.status, 400, JSON.stringify(costlyRefused.body));
    assert.match(costlyRefused.body.error.message, /repeats 1000 times/);

    const wide = {
      ...rx,
      input_schema: {
        type: 'object',
        properties: {
          a: {
            anyOf: Array.from({ length: 200 }, (_, i) => ({
              type: 'object',
              properties: { [`k${i}`]: { const: i } },
            })),
          },
        },
      },
    };
    const big = await api.post('/v1/sessions', { input: 'x', tools: [wide], start: false });
    assert.equal(big.status, 400, JSON.stringify(big.body));
    assert.match(big.body.error.message, /more than 300 subschemas/);
  });

  it('a schema that cannot validate is refused at create (400); $id of one tenant never reaches another', async () => {
    const broken = {
      ...fetchPage,
      input_schema: { type: 'object', properties: { url: { $ref: '#/$defs/missing' } } },
    };
    const r = await api.post('/v1/sessions', { input: 'x', tools: [broken] });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'invalid_request');
    // Refused with the body now (a reference that points at nothing, whether or not the tool validates).
    assert.match(JSON.stringify(r.body.error.details), /points at nothing/);

    // The same $id with other constraints for each tenant: each gets its own schema's answer.
    const withId = (type: string) => ({
      ...fetchPage,
      input_schema: {
        $id: 'urn:shared:fetch',
        type: 'object',
        properties: { url: { type } },
        required: ['url'],
      },
    });
    for (const [who, type, input, bad] of [
      [api, 'string', { url: 1 }, true],
      [apiB, 'number', { url: 1 }, false],
    ] as const) {
      h.fake.reset();
      h.fake.enqueue(toolCall('fetch_page', input, { id: 'toolu_id' }), text('ok'));
      const c = await who.post('/v1/sessions', { input: 'x', tools: [withId(type)] });
      assert.equal(c.status, 201, JSON.stringify(c.body));
      const s = await who.waitStatus(c.body.id, ['idle', 'failed', 'requires_action'], 30_000);
      assert.equal(s.status, bad ? 'idle' : 'requires_action', `${type}: ${JSON.stringify(s)}`);
    }
  });
});
