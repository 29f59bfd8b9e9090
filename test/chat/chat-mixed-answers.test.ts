/**
 * POST /v1/chat with an assistant message that answers a step two ways at once: a client tool's output
 * (`addToolOutput`) beside the approval of another call (`addToolApprovalResponse`). Both are the client's answers
 * to one step, and both must reach the session: the approval alone starts the step, and an output dropped then
 * leaves the session waiting for a result the client believes it gave.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { lastAssistantMessageIsCompleteWithApprovalResponses, validateUIMessages, type UIMessage } from 'ai';
import { text } from '../fake/script.js';
import { weatherAndOrderCalls, weatherAndOrderTools } from '../fixtures/chat-tools.js';
import { PlainChat, chatTransport } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-mixed-key';

describe('chat answers of one step: a client tool output beside an approval', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  /** A session whose step waits on both: the approval of get_weather (`w`) and lookup_order's output (`c`). */
  async function waitingOnBoth(w: string, c: string) {
    const id = (await h.api.post('/v1/sessions', { start: false, ...weatherAndOrderTools })).body
      .id as string;
    h.fake.enqueue(weatherAndOrderCalls(w, c), text('Both done.'));
    await h.api.post(`/v1/sessions/${id}/messages`, { content: 'both' });
    return { id, waiting: await h.api.waitStatus(id, 'requires_action') };
  }

  it('both reach the session in one message: the output is its result, the approval its decision', async () => {
    const { id, waiting } = await waitingOnBoth('toolu_w', 'toolu_c');
    assert.equal(waiting.required_action.type, 'approve_tool_calls');
    const messages = await validateUIMessages<UIMessage>({
      messages: (await h.api.get(`/v1/chat/${id}/messages`)).body,
    });

    const chat = new PlainChat({
      id,
      messages,
      transport: chatTransport(h.service.url, KEY),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    // The client runs its tool first (as onToolCall does on the live stream), then the user approves the other.
    await chat.addToolOutput({ tool: 'lookup_order', toolCallId: 'toolu_c', output: 'shipped' } as never);
    const finished = chat.nextFinish();
    await chat.addToolApprovalResponse({ id: 'toolu_w', approved: true });
    await finished;

    const done = await h.api.waitStatus(id, 'idle');
    assert.equal(done.stop_reason, 'end_turn');
    const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data as Array<{
      role: string;
      content: Array<{ type: string; tool_use_id?: string; content?: unknown }>;
    }>;
    const results = history.flatMap((m) => m.content.filter((b) => b.type === 'tool_result'));
    const lookup = results.find((b) => b.tool_use_id === 'toolu_c');
    assert.deepEqual(JSON.stringify(lookup?.content).includes('shipped'), true, JSON.stringify(results));
  });

  it('a client token without `results`: 403 scope_denied before anything of the message is applied', async () => {
    const { id, waiting } = await waitingOnBoth('toolu_w2', 'toolu_c2');
    const minted = await h.api.post('/v1/client-tokens', { session_id: id, scopes: ['read', 'decide'] });
    const [, assistant] = (await h.api.get(`/v1/chat/${id}/messages`)).body as UIMessage[];
    const parts = assistant!.parts.map((p) =>
      'toolCallId' in p && p.toolCallId === 'toolu_w2'
        ? { ...p, state: 'approval-responded', approval: { id: 'toolu_w2', approved: true } }
        : 'toolCallId' in p && p.toolCallId === 'toolu_c2'
          ? { ...p, state: 'output-available', output: 'shipped' }
          : p,
    );
    const res = await h.api.as(minted.body.token as string).post('/v1/chat', {
      id,
      trigger: 'submit-message',
      messageId: assistant!.id,
      messages: [{ ...assistant!, parts }],
    });
    assert.equal(res.status, 403, JSON.stringify(res.body));
    assert.equal(res.body.error.code, 'scope_denied');
    const after = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(after.revision, waiting.revision, 'nothing applied');
    assert.equal(after.required_action.type, 'approve_tool_calls');
  });
});
