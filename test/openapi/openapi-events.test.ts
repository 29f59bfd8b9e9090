/**
 * Every event the service emits in its main flows validates against the schema openapi.json declares for its type
 * (`Event`: a `oneOf` discriminated by `type`, one `data` schema per type, src/events/schemas.ts). The events of
 * real sessions (streamed turns, approvals, client tool results, PATCH, follow-ups, compaction, a replaced history,
 * a failure, a cancel, a delete) are read back and checked with ajv against the committed document, so events
 * written by Lua or by code the type checker does not see are covered too. Event pages are also checked by the
 * service itself before they are sent (src/openapi/serializer.ts): a page that did not match would be a 500.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { EVENT_TYPES } from '../../src/webhooks/schemas.js';
import { apiError, hang, text, toolCall, toolUse, toolCalls } from '../fake/script.js';
import { OPENAPI_JSON } from '../helpers/openapi.js';
import { startHarness, type Harness } from '../helpers/service.js';

type Envelope = { id: string; type: string; data: unknown };

const lookup = {
  name: 'lookup',
  description: 'Look something up in the client’s database.',
  input_schema: { type: 'object' as const, properties: { q: { type: 'string' } } },
};

describe('events validate against the schema declared for their type', () => {
  let h: Harness;
  const KEY = 'k-events';
  const seen = new Map<string, number>();
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
  ajv.addSchema(JSON.parse(readFileSync(OPENAPI_JSON, 'utf8')), 'openapi.json');
  const validate = ajv.getSchema('openapi.json#/components/schemas/Event')!;

  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(async () => h.close());

  function check(events: Envelope[]) {
    for (const ev of events) {
      assert.ok(
        validate(ev),
        `${ev.type} ${JSON.stringify(ev.data)}: ${JSON.stringify(validate.errors?.slice(0, 5))}`,
      );
      seen.set(ev.type, (seen.get(ev.type) ?? 0) + 1);
    }
  }

  /** The whole log of a session, page by page (each page checked by the service's serializer too). */
  async function logOf(id: string): Promise<Envelope[]> {
    const out: Envelope[] = [];
    let after = '';
    for (;;) {
      const r = await h.api.get(`/v1/sessions/${id}/events?limit=200${after ? `&after=${after}` : ''}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      out.push(...r.body.data);
      if (!r.body.has_more) return out;
      after = r.body.next_cursor;
    }
  }

  const create = async (body: Record<string, unknown>) => {
    const r = await h.api.post('/v1/sessions', body);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  };

  test('a streamed turn, a PATCH of params, a follow-up, a compaction, a replaced history', async () => {
    h.fake.enqueue(text('Hello.'));
    const id = await create({ input: 'hi', stream: true });
    await h.api.waitStatus(id, 'idle', 30_000);
    const p = await h.api.req('PATCH', `/v1/sessions/${id}`, {
      params: { max_tokens: 900 },
    });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    h.fake.enqueue(text('Again.'));
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'more' })).status, 202);
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 2, 30_000);
    h.fake.enqueue({ type: 'message', content: [{ type: 'compaction', content: 'The summary.' }] });
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`, {})).status, 202);
    await h.api.waitFor(id, (s) => s.status === 'idle' && !s.compaction_pending, 30_000);
    const put = await h.api.req('PUT', `/v1/sessions/${id}/messages`, {
      messages: [{ role: 'user', content: 'start over' }],
    });
    assert.ok(put.status < 300, JSON.stringify(put.body));
    check(await logOf(id));
  });

  test('approval, a server tool, a client tool result, a failure, a cancel, a delete', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('get_weather', { location: 'Paris' }, 'toolu_w'),
        toolUse('lookup', { q: 'a' }, 'toolu_l'),
      ]),
      text('Done.'),
    );
    const id = await create({ input: 'go', tools: ['get_weather', lookup], approval: ['get_weather'] });
    await h.api.waitStatus(id, 'requires_action', 30_000);
    const d = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_w`, { decision: 'approve' });
    assert.equal(d.status, 202, JSON.stringify(d.body));
    await h.api.waitFor(id, (s) => s.required_action?.type === 'submit_tool_results', 30_000);
    const r = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_l`, { content: 'found' });
    assert.ok(r.status < 300, JSON.stringify(r.body));
    await h.api.waitStatus(id, 'idle', 30_000);
    check(await logOf(id));

    h.fake.enqueue(apiError(400, 'invalid_request_error'));
    const failed = await create({ input: 'fail please' });
    await h.api.waitStatus(failed, 'failed', 30_000);
    check(await logOf(failed));

    h.fake.enqueue(hang());
    const hung = await create({ input: 'wait' });
    await h.api.waitFor(
      hung,
      () => h.fake.requests.length > 0 && h.fake.requests.at(-1)!.messages.length === 1,
    );
    assert.ok((await h.api.post(`/v1/sessions/${hung}/cancel`)).status < 300);
    await h.api.waitStatus(hung, 'idle', 30_000);
    const events = await logOf(hung);
    // Follow from before the last event: once that one arrives the follower is connected; then delete.
    const it = h.client.follow(hung, { after: events.at(-2)!.id })[Symbol.asyncIterator]();
    assert.equal((await it.next()).value?.id, events.at(-1)!.id);
    assert.equal((await h.api.req('DELETE', `/v1/sessions/${hung}`)).status, 200);
    for (let n = await it.next(); !n.done; n = await it.next()) events.push(n.value as Envelope);
    check(events);
  });

  test('a PATCH of tools, applied by the next turn', async () => {
    h.fake.enqueue(text('One.'), text('Two.'));
    const id = await create({ input: 'hi' });
    await h.api.waitStatus(id, 'idle', 30_000);
    const p = await h.api.req('PATCH', `/v1/sessions/${id}`, { tools: ['get_weather'] });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'more' })).status, 202);
    await h.api.waitFor(id, (s) => s.status !== 'running' && s.iteration === 2, 30_000);
    check(await logOf(id));
  });

  test('a denied call', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 'Oslo' }, { id: 'toolu_o' }), text('Fine.'));
    const id = await create({ input: 'weather', tools: ['get_weather'], approval: 'always' });
    await h.api.waitStatus(id, 'requires_action', 30_000);
    const d = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_o`, { decision: 'deny', reason: 'no' });
    assert.equal(d.status, 202, JSON.stringify(d.body));
    await h.api.waitStatus(id, 'idle', 30_000);
    check(await logOf(id));
  });

  test('the flows above covered the main event types', () => {
    const want = [
      'session.created',
      'session.updated',
      'session.status',
      'session.error',
      'session.deleted',
      'turn.started',
      'turn.completed',
      'stream.event',
      'tool.started',
      'tool.completed',
      'iteration.persisted',
      'message.queued',
      'message.appended',
      'messages.replaced',
      'tool_call.decided',
      'tool_result.submitted',
      'params.updated',
      'tools.updated',
      'tools.applied',
      'compaction.started',
      'compaction.completed',
    ];
    for (const t of want) assert.ok(seen.has(t), `no ${t} among ${[...seen.keys()].join(', ')}`);
    for (const t of seen.keys()) assert.ok((EVENT_TYPES as readonly string[]).includes(t), t);
  });
});
