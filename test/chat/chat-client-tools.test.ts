/**
 * Client (browser) tools through the chat routes (spec §7.3), driven by the `ai` package's Chat: what reaches
 * `onToolCall`, and what the Chat's parts hold once the answer streams.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { lastAssistantMessageIsCompleteWithToolCalls, type UIMessage, type UIMessageChunk } from 'ai';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { PlainChat, chatTransport, readAll, submitRaw } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-client-tools-key';
const lookupOrder = {
  name: 'lookup_order',
  description: 'Find an order.',
  input_schema: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
};

type ToolPart = { type: string; toolCallId: string; state: string; output?: unknown; errorText?: string };
const textOf = (m: UIMessage | undefined) =>
  (m?.parts ?? []).flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');
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
    const send = (messages: UIMessage[], messageId?: string) =>
      submitRaw(h.service.url, KEY, id, messages, messageId);
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
        await submitRaw(h.service.url, KEY, id, [
          { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'order 7?' }] },
        ]),
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

    it("a reply under review (pause_after_turn): its calls are the client's, as the history shows them", async () => {
      const r = await h.api.post('/v1/sessions', {
        start: false,
        tools: [validated],
        pause_after_turn: true,
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const id = r.body.id as string;
      h.fake.enqueue(
        toolCalls([
          toolUse('lookup_order', { wrong: 1 }, 'toolu_rbad'),
          toolUse('lookup_order', { order_id: '7' }, 'toolu_rgood'),
        ]),
        text('Order 7 is found.'),
      );
      const send = (messages: UIMessage[]) => submitRaw(h.service.url, KEY, id, messages);
      const asked: UIMessage = { id: 'u-review', role: 'user', parts: [{ type: 'text', text: 'orders?' }] };
      const { chunks, message } = await readAll(await send([asked]));
      assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.required_action?.type, 'review_turn');
      // Nothing was checked yet (the step runs after POST …/continue): both calls are offered as the client's, as a
      // tool's without validate. The reply's own iteration.persisted, before the review's status, made them the
      // service's (providerExecuted): the valid one, the client's after continue, never reached onToolCall.
      const offered = chunks.filter(
        (c): c is Extract<UIMessageChunk, { type: 'tool-input-available' }> =>
          c.type === 'tool-input-available',
      );
      assert.deepEqual(
        offered.map((c) => [c.toolCallId, c.providerExecuted ?? false]),
        [
          ['toolu_rbad', false],
          ['toolu_rgood', false],
        ],
      );
      assert.ok(!chunks.some((c) => c.type === 'tool-output-error'));
      assert.deepEqual(chunks.at(-1), { type: 'finish', finishReason: 'tool-calls' });
      // The live message is the history's.
      const shape = (m: UIMessage | undefined) =>
        toolParts(m).map((p) => [
          p.toolCallId,
          p.state,
          'providerExecuted' in p ? p.providerExecuted : undefined,
        ]);
      const history = (await h.api.get(`/v1/chat/${id}/messages`)).body as UIMessage[];
      assert.deepEqual(shape(message), shape(history.at(-1)));
      // After the review, the service refuses the one input and waits for the client's output of the other.
      assert.equal((await h.api.post(`/v1/sessions/${id}/continue`, {})).status, 202);
      const waiting = await h.api.waitStatus(id, 'requires_action');
      assert.equal(waiting.required_action?.type, 'submit_tool_results');
      assert.deepEqual(
        waiting.required_action?.tool_calls.map((c: { id: string }) => c.id),
        ['toolu_rgood'],
      );
      const after = (await h.api.get(`/v1/chat/${id}/messages`)).body as UIMessage[];
      assert.deepEqual(
        toolParts(after.at(-1)).map((p) => [p.toolCallId, p.state]),
        [
          ['toolu_rbad', 'output-error'],
          ['toolu_rgood', 'input-available'],
        ],
      );
      // The client's output goes in through the chat as any client tool's.
      const answered = after.at(-1)!;
      const withOutput: UIMessage = {
        ...answered,
        parts: answered.parts.map((p) =>
          'toolCallId' in p && p.toolCallId === 'toolu_rgood'
            ? ({ ...p, state: 'output-available', output: 'found' } as UIMessage['parts'][number])
            : p,
        ),
      };
      const end = await readAll(await send([asked, withOutput]));
      // The model got the refusal and the client's output.
      const results = h.fake.requests.at(-1)?.body.messages.at(-1)?.content;
      assert.ok(Array.isArray(results));
      assert.deepEqual(
        results.map((b) => (b.type === 'tool_result' ? [b.tool_use_id, b.is_error ?? false] : [b.type])),
        [
          ['toolu_rbad', true],
          ['toolu_rgood', false],
        ],
      );
      // The model's next reply is under review in its turn.
      assert.equal(textOf(end.message), 'Order 7 is found.');
      assert.deepEqual(end.chunks.at(-1), { type: 'finish', finishReason: 'tool-calls' });
    });
  });
});
