/**
 * Client (browser) tools through the chat routes (spec §7.3), driven by the `ai` package's Chat: what reaches
 * `onToolCall`, and what the Chat's parts hold once the answer streams.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { lastAssistantMessageIsCompleteWithToolCalls, type UIMessage, type UIMessageChunk } from 'ai';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { PlainChat, chatTransport, readAll } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-client-tools-key';
const lookupOrder = {
  name: 'lookup_order',
  description: 'Find an order.',
  input_schema: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
};

type ToolPart = { type: string; toolCallId: string; state: string; output?: unknown; errorText?: string };
const toolParts = (m: UIMessage | undefined): ToolPart[] =>
  (m?.parts ?? []).filter((p): p is UIMessage['parts'][number] & ToolPart => p.type.startsWith('tool-'));

describe('chat: client tools', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  async function session(tools: unknown[]) {
    const r = await h.api.post('/v1/sessions', { start: false, tools });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  }

  describe('validate: true', () => {
    const validated = { ...lookupOrder, validate: true };

    it('a refused input never reaches onToolCall; the valid call beside it does, and the run goes on', async () => {
      const id = await session([validated]);
      h.fake.enqueue(
        toolCalls([
          toolUse('lookup_order', { wrong: 1 }, 'toolu_bad'),
          toolUse('lookup_order', { order_id: '7' }, 'toolu_good'),
        ]),
        text('One lookup failed.'),
      );
      const called: string[] = [];
      const chat: PlainChat = new PlainChat({
        id,
        transport: chatTransport(h.service.url, KEY),
        sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
        onToolCall: ({ toolCall: c }) => {
          called.push(c.toolCallId);
          void chat.addToolOutput({ tool: 'lookup_order', toolCallId: c.toolCallId, output: 'found' });
        },
      });
      const both = chat.nextFinish(2);
      await chat.sendMessage({ text: 'orders?' });
      await both;
      assert.equal(chat.error, undefined);
      assert.deepEqual(called, ['toolu_good']);
      const parts = toolParts(chat.messages.at(-1));
      assert.deepEqual(
        parts.map((p) => [p.toolCallId, p.state]),
        [
          ['toolu_bad', 'output-error'],
          ['toolu_good', 'output-available'],
        ],
      );
      assert.match(parts[0]!.errorText ?? '', /^Error: /);
      assert.equal((await h.api.waitStatus(id, 'idle')).status, 'idle');
    });

    it('a reply whose only call is refused: one answer, no onToolCall, the model gets the error', async () => {
      const id = await session([validated]);
      h.fake.enqueue(
        toolCall('lookup_order', { order_id: 7 }, { id: 'toolu_only' }),
        text('Let me fix that.'),
      );
      const { chunks, message } = await readAll(
        await chatTransport(h.service.url, KEY).sendMessages({
          chatId: id,
          messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'order 7?' }] }],
          trigger: 'submit-message',
          messageId: undefined,
          abortSignal: undefined,
        }),
      );
      const offered = chunks.filter(
        (c): c is Extract<UIMessageChunk, { type: 'tool-input-available' }> =>
          c.type === 'tool-input-available',
      );
      assert.equal(offered.length, 1);
      assert.equal(offered[0]!.providerExecuted, true, 'not offered to onToolCall');
      const i = chunks.indexOf(offered[0]!);
      assert.equal(chunks[i + 1]?.type, 'tool-output-error');
      assert.deepEqual(
        toolParts(message).map((p) => p.state),
        ['output-error'],
      );
      assert.equal(chunks.at(-1)?.type, 'finish');
    });
  });
});
