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

  it("an object output stays the client's object: the answer does not echo it back (as its JSON text)", async () => {
    const id = await session([lookupOrder]);
    h.fake.enqueue(toolCall('lookup_order', { order_id: '1' }, { id: 'toolu_obj' }), text('Shipped.'));
    const output = { status: 'shipped', eta: 3 };
    const seen: unknown[] = [];
    const chat: PlainChat = new PlainChat({
      id,
      transport: chatTransport(h.service.url, KEY),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
      onChange: () => {
        const part = toolParts(chat?.messages.at(-1)).find((p) => p.toolCallId === 'toolu_obj');
        if (part?.output !== undefined) seen.push(part.output);
      },
      onToolCall: ({ toolCall: c }) =>
        void chat.addToolOutput({ tool: 'lookup_order', toolCallId: c.toolCallId, output }),
    });
    const both = chat.nextFinish(2);
    await chat.sendMessage({ text: 'where is it?' });
    await both;
    assert.equal(chat.error, undefined);
    assert.ok(seen.length > 0);
    for (const o of seen) assert.deepEqual(o, output, 'the part keeps the object');
    // The model got its JSON text.
    const content = h.fake.requests.at(-1)?.body.messages.at(-1)?.content ?? [];
    const results = (typeof content === 'string' ? [] : content).flatMap((b) =>
      b.type === 'tool_result' ? [b.content] : [],
    );
    assert.deepEqual(results, [JSON.stringify(output)]);
  });

  it("the answer to a raw post of a client's output carries no output of that call", async () => {
    const id = await session([lookupOrder]);
    h.fake.enqueue(toolCall('lookup_order', { order_id: '1' }, { id: 'toolu_raw' }), text('Done.'));
    const transport = chatTransport(h.service.url, KEY);
    const send = (messages: UIMessage[], messageId?: string) =>
      transport.sendMessages({
        chatId: id,
        messages,
        trigger: 'submit-message',
        messageId,
        abortSignal: undefined,
      });
    const question: UIMessage = { id: 'u-raw', role: 'user', parts: [{ type: 'text', text: 'go' }] };
    const first = await readAll(await send([question]));
    const asked = first.message!;
    const answered: UIMessage = {
      ...asked,
      parts: asked.parts.map((p) =>
        'toolCallId' in p && p.toolCallId === 'toolu_raw'
          ? { ...p, state: 'output-available', output: 'RESULT' }
          : p,
      ) as UIMessage['parts'],
    };
    const { chunks } = await readAll(await send([question, answered], asked.id));
    assert.deepEqual(
      chunks.filter((c) => 'toolCallId' in c && c.toolCallId === 'toolu_raw'),
      [],
    );
    assert.equal(chunks.at(-1)?.type, 'finish');
  });

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
