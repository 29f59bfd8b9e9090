/**
 * GET /v1/chat/:id/messages while a step waits for the client: the calls of that step already answered (a server
 * tool that ran beside a client tool, or beside a call held for approval) are answered there as the stream answered
 * them, so a `Chat` seeded from the page after a reload sends its client tool output or its approval and the run
 * goes on.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  validateUIMessages,
  type UIMessage,
} from 'ai';
import { reply, text, textBlock, toolUse } from '../fake/script.js';
import { PlainChat, chatTransport } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-pending-key';
const lookupOrder = {
  name: 'lookup_order',
  description: 'Find an order.',
  input_schema: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
};

describe('chat history of a step that waits for the client', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  /** The page as a reloaded `Chat` gets it (validated by the `ai` package), and the part of `toolCallId`. */
  async function page(id: string, toolCallId: string) {
    const messages = await validateUIMessages<UIMessage>({
      messages: (await h.api.get(`/v1/chat/${id}/messages`)).body,
    });
    const part = messages.at(-1)!.parts.find((p) => 'toolCallId' in p && p.toolCallId === toolCallId);
    return { messages, part: part as Record<string, unknown> | undefined };
  }

  it('a server tool that ran beside a client tool: output-available, and the client tool output goes on', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false, tools: ['get_weather', lookupOrder] })).body
      .id;
    h.fake.enqueue(
      reply([
        textBlock('Checking both.'),
        toolUse('get_weather', { location: 'Paris' }, 'toolu_w'),
        toolUse('lookup_order', { order_id: '42' }, 'toolu_c'),
      ]),
      text('Both done.'),
    );
    await h.api.post(`/v1/sessions/${id}/messages`, { content: 'both' });
    const waiting = await h.api.waitStatus(id, 'requires_action');
    assert.equal(waiting.required_action.type, 'submit_tool_results');
    const { messages, part } = await page(id, 'toolu_w');
    assert.equal(part?.['state'], 'output-available', JSON.stringify(part));

    const chat = new PlainChat({
      id,
      messages,
      transport: chatTransport(h.service.url, KEY),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    });
    const finished = chat.nextFinish();
    await chat.addToolOutput({ tool: 'lookup_order', toolCallId: 'toolu_c', output: 'shipped' } as never);
    await finished;
    const done = await h.api.waitStatus(id, 'idle');
    assert.equal(done.stop_reason, 'end_turn');
  });

  it('a server tool that ran beside a call held for approval: output-available, and the approval goes on', async () => {
    const id = (
      await h.api.post('/v1/sessions', {
        start: false,
        tools: ['get_weather', 'calculate_sum'],
        approval: ['get_weather'],
      })
    ).body.id;
    h.fake.enqueue(
      reply([
        toolUse('calculate_sum', { a: 1, b: 2 }, 'toolu_s'),
        toolUse('get_weather', { location: 'Paris' }, 'toolu_a'),
      ]),
      text('Done.'),
    );
    await h.api.post(`/v1/sessions/${id}/messages`, { content: 'both' });
    const waiting = await h.api.waitStatus(id, 'requires_action');
    assert.equal(waiting.required_action.type, 'approve_tool_calls');
    const { messages, part } = await page(id, 'toolu_s');
    assert.equal(part?.['state'], 'output-available', JSON.stringify(part));
    assert.equal((await page(id, 'toolu_a')).part?.['state'], 'approval-requested');

    const chat = new PlainChat({
      id,
      messages,
      transport: chatTransport(h.service.url, KEY),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    const finished = chat.nextFinish();
    await chat.addToolApprovalResponse({ id: 'toolu_a', approved: true });
    await finished;
    const done = await h.api.waitStatus(id, 'idle');
    assert.equal(done.stop_reason, 'end_turn');
  });
});
