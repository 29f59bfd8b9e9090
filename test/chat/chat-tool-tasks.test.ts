/**
 * POST /v1/chat with a tenant tool (a worker tool) called beside a client tool: the worker's task is queued while
 * the client is asked, and its result may be delivered once the chat's answer has ended at `requires_action`. The
 * stream that answers the client's tool output shows it (`tool-output-available` for the worker's call, which the
 * client's message holds without an output), so the `Chat`'s message has every output the model got; a keyed replay
 * of that answer shows it again; a client that has it already is not sent it twice. A result delivered between the
 * request's read of the session and its read of the stream's cursor, whose step the run it starts has written before
 * the request reads the session again, is shown too (from the read the request's write was planned from).
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { uiMessageChunkSchema, type UIMessage } from 'ai';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { PlainChat, chatTransport, sseDataLines } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-tool-tasks-key';
const askUser = {
  name: 'ask_user',
  description: 'Ask the user a question.',
  input_schema: { type: 'object' as const, properties: { q: { type: 'string' } } },
};

/** A tool part of `m` by call id. */
const partOf = (m: UIMessage | undefined, id: string): any =>
  m?.parts.find((p) => 'toolCallId' in p && p.toolCallId === id);

describe(
  'chat: a worker’s result delivered while the session waits for the client',
  { timeout: 120_000 },
  () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, TOOL_TASK_LEASE_MS: '5000' } });
      const put = await h.api.as(KEY).req('PUT', '/v1/tools/stock_check', {
        description: 'Check the stock of an item.',
        input_schema: { type: 'object', properties: { item: { type: 'string' } } },
        runner: { type: 'worker' },
      });
      assert.equal(put.status, 201, JSON.stringify(put.body));
    });
    after(() => h?.close());
    beforeEach(() => h.fake.reset());

    /**
     * A chat whose first answer ended at `requires_action` (ask_user, `c`) and whose worker call (`w`) was answered by
     * a worker afterwards: the chat's message holds the worker's call without an output.
     */
    async function answeredMeanwhile(c: string, w: string) {
      const api = h.api.as(KEY);
      const id = (await api.post('/v1/sessions', { start: false, tools: [askUser, 'stock_check'] })).body
        .id as string;
      h.fake.enqueue(
        toolCalls([
          toolUse('ask_user', { q: 'Which size?' }, c),
          toolUse('stock_check', { item: 'boots' }, w),
        ]),
        text('Size 42 boots are in stock.'),
      );
      const chat = new PlainChat({ id, transport: chatTransport(h.service.url, KEY) });
      const first = chat.nextFinish();
      await chat.sendMessage({ text: 'Boots?' });
      await first;
      assert.equal((await api.waitStatus(id, 'requires_action')).required_action.tool_calls[0].id, c);
      const claimed = await api.post('/v1/tool-tasks/claim', { tools: ['stock_check'], wait_ms: 5000 });
      assert.equal(claimed.body.tasks.length, 1, JSON.stringify(claimed.body));
      const task = claimed.body.tasks[0];
      assert.equal(task.tool_use_id, w);
      assert.equal(
        (await api.post(`/v1/tool-tasks/${task.id}/result`, { content: 'in stock: 3' })).status,
        200,
      );
      assert.equal((await api.get(`/v1/sessions/${id}`)).body.status, 'requires_action');
      assert.equal(partOf(chat.messages.at(-1), w)?.state, 'input-available', 'the first answer had ended');
      return { id, chat };
    }

    it('the stream that answers the client’s output shows it, and the message ends with every output', async () => {
      const { id, chat } = await answeredMeanwhile('toolu_c1', 'toolu_w1');
      await chat.addToolOutput({ tool: 'ask_user', toolCallId: 'toolu_c1', output: '42' } as never);
      const second = chat.nextFinish();
      await chat.sendMessage();
      const message = await second;
      assert.equal((await h.api.as(KEY).waitStatus(id, 'idle')).status, 'idle');
      const worker = partOf(message, 'toolu_w1');
      assert.equal(worker?.state, 'output-available', JSON.stringify(message.parts));
      assert.equal(worker.output, 'in stock: 3');
      assert.ok(message.parts.some((p) => p.type === 'text' && p.text === 'Size 42 boots are in stock.'));
    });

    it('a result delivered between the request’s read of the session and of the stream’s cursor is shown', async () => {
      const api = h.api.as(KEY);
      const id = (await api.post('/v1/sessions', { start: false, tools: [askUser, 'stock_check'] })).body
        .id as string;
      let answer!: () => void;
      const modelGate = new Promise<void>((r) => (answer = r));
      h.fake.enqueue(
        toolCalls([
          toolUse('ask_user', { q: 'Which size?' }, 'toolu_c4'),
          toolUse('stock_check', { item: 'boots' }, 'toolu_w4'),
        ]),
        { ...text('Size 44 boots are in stock.'), gate: modelGate },
      );
      const chat = new PlainChat({ id, transport: chatTransport(h.service.url, KEY) });
      const first = chat.nextFinish();
      await chat.sendMessage({ text: 'Boots?' });
      await first;
      assert.equal((await api.waitStatus(id, 'requires_action')).status, 'requires_action');
      const claimed = await api.post('/v1/tool-tasks/claim', { tools: ['stock_check'], wait_ms: 5000 });
      assert.equal(claimed.body.tasks.length, 1, JSON.stringify(claimed.body));
      const task = claimed.body.tasks[0];

      // The worker's result lands as the chat request reads the log's newest id (after its read of the session);
      // the session as the request's write leaves it is read once the run it started has sent the results to the
      // model (its step is gone), whose answer waits until then.
      const log = (h.service.app as any).eventsHub.eventLog;
      const lastId = log.lastId;
      const store = h.service.app.store as any;
      const loadFor = store.loadFor;
      let delivered = false;
      let reads = -1;
      log.lastId = async function (this: unknown, sid: string, ...rest: unknown[]) {
        if (sid === id && !delivered) {
          delivered = true;
          const r = await api.post(`/v1/tool-tasks/${task.id}/result`, { content: 'in stock: 4' });
          assert.equal(r.status, 200, JSON.stringify(r.body));
          reads = 0;
        }
        return lastId.call(this, sid, ...rest);
      };
      store.loadFor = async function (this: unknown, tenant: string, sid: string, ...rest: unknown[]) {
        // The first read after the cursor is the write's own; the second, the session after it.
        if (sid === id && reads >= 0 && reads < 2 && ++reads === 2) {
          await h.fake.waitForRequests(2, 10_000);
          const after = await loadFor.call(this, tenant, sid, ...rest);
          answer();
          return after;
        }
        return loadFor.call(this, tenant, sid, ...rest);
      };
      try {
        await chat.addToolOutput({ tool: 'ask_user', toolCallId: 'toolu_c4', output: '44' } as never);
        const second = chat.nextFinish();
        await chat.sendMessage();
        const message = await second;
        assert.equal(reads, 2, 'the request read the session twice after its cursor');
        const worker = partOf(message, 'toolu_w4');
        assert.equal(worker?.state, 'output-available', JSON.stringify(message.parts));
        assert.equal(worker.output, 'in stock: 4');
        assert.ok(message.parts.some((p) => p.type === 'text' && p.text === 'Size 44 boots are in stock.'));
      } finally {
        answer();
        log.lastId = lastId;
        store.loadFor = loadFor;
      }
    });

    it('a client token without `read` answering the client’s call gets no output of the worker’s', async () => {
      const { id, chat } = await answeredMeanwhile('toolu_c5', 'toolu_w5');
      const assistant = chat.messages.at(-1)!;
      const parts = assistant.parts.map((p: any) =>
        p.toolCallId === 'toolu_c5' ? { ...p, state: 'output-available', output: '45' } : p,
      );
      const minted = await h.api.as(KEY).post('/v1/client-tokens', { session_id: id, scopes: ['results'] });
      assert.equal(minted.status, 201, JSON.stringify(minted.body));
      const res = await fetch(`${h.service.url}/v1/chat`, {
        method: 'POST',
        headers: { authorization: `Bearer ${minted.body.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          id,
          messages: [{ ...assistant, parts }],
          trigger: 'submit-message',
          messageId: assistant.id,
        }),
      });
      assert.equal(res.status, 200);
      const chunks = sseDataLines(await res.text())
        .filter((l) => l !== '[DONE]')
        .map((l) => JSON.parse(l));
      assert.deepEqual(
        chunks.filter((c) => String(c.type).startsWith('tool-')),
        [],
        JSON.stringify(chunks),
      );
      // The result went to the model all the same.
      assert.equal((await h.api.as(KEY).waitStatus(id, 'idle')).status, 'idle');
      const sent = h.fake.requests.at(-1)!.messages.at(-1)!.content as any[];
      assert.deepEqual(
        sent.filter((b: any) => b.type === 'tool_result').map((b: any) => b.tool_use_id),
        ['toolu_c5', 'toolu_w5'],
      );
    });

    it('a keyed replay of that answer shows it again; a message that has the output is not sent it', async () => {
      const { id, chat } = await answeredMeanwhile('toolu_c2', 'toolu_w2');
      const assistant = chat.messages.at(-1)!;
      const answered = {
        ...assistant,
        parts: assistant.parts.map((p: any) =>
          p.toolCallId === 'toolu_c2' ? { ...p, state: 'output-available', output: '43' } : p,
        ),
      };
      const post = (body: unknown, key: string) =>
        fetch(`${h.service.url}/v1/chat`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${KEY}`,
            'content-type': 'application/json',
            'idempotency-key': key,
          },
          body: JSON.stringify(body),
        });
      const body = { id, messages: [answered], trigger: 'submit-message', messageId: assistant.id };
      const outputs = (lines: string[]) =>
        lines
          .filter((l) => l !== '[DONE]')
          .map((l) => JSON.parse(l))
          .filter((c) => c.type === 'tool-output-available' && c.toolCallId === 'toolu_w2');
      const first = sseDataLines(await (await post(body, 'answer-once')).text());
      for (const d of first.filter((l) => l !== '[DONE]'))
        assert.ok((await uiMessageChunkSchema().validate!(JSON.parse(d))).success, d);
      assert.deepEqual(outputs(first), [
        { type: 'tool-output-available', toolCallId: 'toolu_w2', output: 'in stock: 3' },
      ]);
      assert.equal((await h.api.as(KEY).waitStatus(id, 'idle')).status, 'idle');
      const again = await post(body, 'answer-once');
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(outputs(sseDataLines(await again.text())), outputs(first), 'replayed as first sent');

      // The same step answered by a client whose message shows the worker's output already: not sent again.
      const { id: id3, chat: chat3 } = await answeredMeanwhile('toolu_c3', 'toolu_w3');
      const m3 = chat3.messages.at(-1)!;
      const parts = m3.parts.map((p: any) =>
        p.toolCallId === 'toolu_c3' || p.toolCallId === 'toolu_w3'
          ? { ...p, state: 'output-available', output: p.toolCallId === 'toolu_c3' ? '44' : 'in stock: 3' }
          : p,
      );
      const res = await post({ id: id3, messages: [{ ...m3, parts }], messageId: m3.id }, 'answer-three');
      const lines = sseDataLines(await res.text());
      assert.equal(
        lines.filter((l) => l.includes('tool-output-available') && l.includes('toolu_w3')).length,
        0,
        lines.join('\n'),
      );
      assert.equal((await h.api.as(KEY).waitStatus(id3, 'idle')).status, 'idle');
    });
  },
);
