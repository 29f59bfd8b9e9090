/**
 * A denied tool call in GET /v1/chat/:id/messages: `output-denied` with its `approval` (`approved: false`, the
 * reason), as the live stream left the part, never `output-error` — though the history answers it with an
 * `is_error` result. A tool's error worded like a denial stays an error (src/chat/denials.ts).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { lastAssistantMessageIsCompleteWithApprovalResponses, validateUIMessages, type UIMessage } from 'ai';
import { reply, text, toolUse } from '../fake/script.js';
import { PlainChat, chatTransport } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-denials-key';
const lookupOrder = {
  name: 'lookup_order',
  description: 'Find an order.',
  input_schema: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
};

describe('chat history of denied tool calls', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  /** The page as a reloaded `Chat` gets it (validated by the `ai` package): the part of each call, by id. */
  async function parts(id: string) {
    const messages = await validateUIMessages<UIMessage>({
      messages: (await h.api.get(`/v1/chat/${id}/messages`)).body,
    });
    const out = new Map<string, Record<string, unknown>>();
    for (const m of messages)
      for (const p of m.parts) if ('toolCallId' in p) out.set(p.toolCallId, p as Record<string, unknown>);
    return out;
  }

  it('a denial through Chat: the reloaded part is the live one (output-denied, approved false, the reason)', async () => {
    const id = (
      await h.api.post('/v1/sessions', { start: false, tools: ['get_weather'], approval: 'always' })
    ).body.id;
    h.fake.enqueue(
      reply([toolUse('get_weather', { location: 'Paris' }, 'toolu_d')]),
      text('Fine, I will not.'),
    );
    const chat = new PlainChat({
      id,
      transport: chatTransport(h.service.url, KEY),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text: 'What is the weather in Paris?' });
    const finished = chat.nextFinish();
    await chat.addToolApprovalResponse({ id: 'toolu_d', approved: false, reason: 'not now' });
    await finished;
    await h.api.waitStatus(id, 'idle');
    const live = chat.messages.at(-1)!.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(live && 'state' in live && live.state, 'output-denied');
    const reloaded = (await parts(id)).get('toolu_d');
    assert.deepEqual(reloaded, {
      type: 'tool-get_weather',
      toolCallId: 'toolu_d',
      state: 'output-denied',
      input: { location: 'Paris' },
      approval: { id: 'toolu_d', approved: false, reason: 'not now' },
    });
    const { type, toolCallId, state, input, approval } = live as Record<string, unknown>;
    assert.deepEqual(reloaded, { type, toolCallId, state, input, approval });
  });

  it('a REST denial: output-denied while the step still waits and after; a client error worded alike stays an error', async () => {
    const id = (
      await h.api.post('/v1/sessions', {
        start: false,
        tools: ['get_weather', lookupOrder],
        approval: ['get_weather'],
      })
    ).body.id;
    h.fake.enqueue(
      reply([
        toolUse('get_weather', { location: 'Paris' }, 'toolu_a'),
        toolUse('get_weather', { location: 'Rome' }, 'toolu_b'),
        toolUse('lookup_order', { order_id: '42' }, 'toolu_c'),
      ]),
      text('Done.'),
    );
    await h.api.post(`/v1/sessions/${id}/messages`, { content: 'all three' });
    await h.api.waitStatus(id, 'requires_action');
    const denied = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_a`, { decision: 'deny' });
    assert.ok(denied.status < 300, JSON.stringify(denied.body));
    // toolu_b still waits for its decision: the denial is the pending step's.
    const waiting = await parts(id);
    assert.equal(waiting.get('toolu_a')?.['state'], 'output-denied', JSON.stringify(waiting.get('toolu_a')));
    assert.deepEqual(waiting.get('toolu_a')?.['approval'], { id: 'toolu_a', approved: false });
    assert.equal(waiting.get('toolu_b')?.['state'], 'approval-requested');

    const approved = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_b`, { decision: 'approve' });
    assert.ok(approved.status < 300, JSON.stringify(approved.body));
    await h.api.waitStatus(id, 'requires_action');
    const sent = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_c', content: 'Tool call denied: by the order system', is_error: true }],
    });
    assert.ok(sent.status < 300, JSON.stringify(sent.body));
    await h.api.waitStatus(id, 'idle');
    const done = await parts(id);
    assert.equal(done.get('toolu_a')?.['state'], 'output-denied', JSON.stringify(done.get('toolu_a')));
    assert.deepEqual(done.get('toolu_a')?.['approval'], { id: 'toolu_a', approved: false });
    assert.equal(done.get('toolu_b')?.['state'], 'output-available');
    assert.equal(done.get('toolu_c')?.['state'], 'output-error');
    assert.equal(done.get('toolu_c')?.['errorText'], 'Tool call denied: by the order system');
    // The records keep the denials for this page; their route does not show them.
    const records = (await h.api.get(`/v1/sessions/${id}/iterations`)).body.data;
    assert.equal(records[0].tool_calls.length, 3);
    assert.ok(!('denied' in records[0]), JSON.stringify(records[0]));
    assert.ok(!('denied' in (await h.api.get(`/v1/sessions/${id}/iterations/1`)).body));
  });

  it('a denial whose result a review replaced is shown as the result the model gets, not as denied', async () => {
    const id = (
      await h.api.post('/v1/sessions', {
        start: false,
        tools: ['get_weather', 'evaluate_expression'],
        approval: ['get_weather'],
        on_tool_error: 'pause',
      })
    ).body.id;
    h.fake.enqueue(
      reply([
        toolUse('get_weather', { location: 'Paris' }, 'toolu_p'),
        toolUse('evaluate_expression', { expression: '1/' }, 'toolu_q'),
      ]),
      text('Done.'),
    );
    await h.api.post(`/v1/sessions/${id}/messages`, { content: 'both' });
    await h.api.waitStatus(id, 'requires_action');
    const denied = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_p`, { decision: 'deny' });
    assert.ok(denied.status < 300, JSON.stringify(denied.body));
    // The failed evaluation holds the step for review; the client replaces the denial's result.
    const review = await h.api.waitStatus(id, 'requires_action');
    assert.equal(review.required_action.type, 'review_tool_results');
    const put = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_p`, {
      content: 'Not available here.',
      is_error: true,
    });
    assert.ok(put.status < 300, JSON.stringify(put.body));
    const waiting = (await parts(id)).get('toolu_p');
    assert.equal(waiting?.['state'], 'output-error', JSON.stringify(waiting));
    assert.equal(waiting?.['errorText'], 'Not available here.');
  });
});
