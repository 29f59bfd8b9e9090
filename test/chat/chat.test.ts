/**
 * The AI SDK's chat routes (spec §7.3) driven by the `ai` package itself against the running service and its fake
 * upstream: DefaultChatTransport (sendMessages, reconnectToStream; it checks every chunk against the package's own
 * schema), readUIMessageStream, and the package's Chat on a plain state (test/helpers/chat.ts) for the
 * addToolApprovalResponse / addToolOutput round trips. The history answers are checked with validateUIMessages.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  readUIMessageStream,
  uiMessageChunkSchema,
  validateUIMessages,
  type UIMessage,
  type UIMessageChunk,
} from 'ai';
import type { FakeMessageReply } from '../../src/offline/wire.js';
import {
  apiError,
  hang,
  reply,
  text,
  textBlock,
  thinking,
  toolCall,
  toolCalls,
  toolUse,
} from '../fake/script.js';
import { ChatTranslator, type UIChunk } from '../../src/chat/chunks.js';
import { AlreadyPosted } from '../../src/store/apply-ops.js';
import { PlainChat, chatTransport, readAll, sseDataLines } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { writerResearcher, writerWithResearcher } from '../helpers/agents.js';

const KEY = 'chat-key-1';
const OTHER = 'chat-key-2';
const params = { model: 'claude-test', max_tokens: 256 };
const lookupOrder = {
  name: 'lookup_order',
  description: 'Find an order by its number and tell its delivery status.',
  input_schema: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
};

const userMessage = (t: string, id = `u-${Math.random().toString(36).slice(2)}`): UIMessage => ({
  id,
  role: 'user',
  parts: [{ type: 'text', text: t }],
});

const types = (chunks: UIMessageChunk[]) => chunks.map((c) => c.type);
/** The chunk types with runs of one type collapsed (deltas come in as many pieces as the fake cut them). */
const shape = (chunks: UIMessageChunk[]) => types(chunks).filter((t, i, all) => t !== all[i - 1]);
const textOf = (m: UIMessage | undefined) =>
  (m?.parts ?? []).flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');

describe('chat routes: the AI SDK UI message stream', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY},other:${OTHER}` } });
  });
  after(() => h?.close());

  const transport = () => chatTransport(h.service.url, KEY);
  async function session(body: Record<string, unknown> = {}) {
    const r = await h.api.post('/v1/sessions', { params, start: false, ...body });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  }
  const send = (chatId: string, messages: UIMessage[]) =>
    transport().sendMessages({
      chatId,
      messages,
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: undefined,
    });
  async function history(id: string) {
    const r = await h.api.get(`/v1/chat/${id}/messages`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return validateUIMessages<UIMessage>({ messages: r.body });
  }
  /**
   * A page loaded mid-run: a `Chat` seeded with `initial` (the history page) resumes the run's stream; the fake's
   * held turn goes on once the replay reaches the message.
   */
  async function reloaded(id: string, initial: UIMessage[]): Promise<PlainChat> {
    const chat: PlainChat = new PlainChat({
      id,
      messages: initial,
      transport: transport(),
      onChange: () => void (chat?.status === 'streaming' && h.fake.held > 0 && h.fake.resume()),
    });
    await chat.resumeStream();
    return chat;
  }

  test('plain text and reasoning: one step, the parts in order, finish stop; the history says the same', async () => {
    const id = await session();
    h.fake.enqueue(reply([thinking('Let me think about it.'), textBlock('Hello from the fake model.')]));
    const { chunks, message } = await readAll(await send(id, [userMessage('hi')]));
    assert.deepEqual(shape(chunks), [
      'start',
      'start-step',
      'reasoning-start',
      'reasoning-delta',
      'reasoning-end',
      'text-start',
      'text-delta',
      'text-end',
      'finish-step',
      'finish',
    ]);
    const end = chunks.at(-1);
    assert.equal(end?.type === 'finish' && end.finishReason, 'stop');
    assert.deepEqual(
      message?.parts.map((p) => p.type),
      ['step-start', 'reasoning', 'text'],
    );
    assert.equal(textOf(message), 'Hello from the fake model.');
    const msgs = await history(id);
    assert.deepEqual(
      msgs.map((m) => [m.role, m.parts.map((p) => p.type)]),
      [
        ['user', ['text']],
        ['assistant', ['step-start', 'reasoning', 'text']],
      ],
    );
    assert.equal(textOf(msgs[1]), 'Hello from the fake model.');
    const again = await history(id);
    assert.deepEqual(
      again.map((m) => m.id),
      msgs.map((m) => m.id),
      'ids are stable',
    );
  });

  test('a message that starts a run names its reply as the history will (a resumed answer replaces it, never adds one)', async () => {
    const id = await session();
    const startId = (chunks: UIMessageChunk[]) => {
      const c = chunks[0];
      return c?.type === 'start' ? c.messageId : undefined;
    };
    h.fake.enqueue(text('First answer.'));
    const first = await readAll(await send(id, [userMessage('one')]));
    h.fake.enqueue(text('Second answer.'));
    const second = await readAll(await send(id, [userMessage('two')]));
    const msgs = await history(id);
    assert.deepEqual(
      msgs.map((m) => m.role),
      ['user', 'assistant', 'user', 'assistant'],
    );
    assert.equal(startId(first.chunks), msgs[1]!.id);
    assert.equal(startId(second.chunks), msgs[3]!.id);
    assert.equal(first.message?.id, msgs[1]!.id);
    // A failed run leaves its user turn last: the next message joins it, and the reply follows that turn.
    h.fake.enqueue(apiError(400, 'invalid_request_error'));
    await readAll(await send(id, [userMessage('three')]));
    assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'failed');
    h.fake.enqueue(text('Fourth answer.'));
    const fourth = await readAll(await send(id, [userMessage('four')]));
    const after = await history(id);
    assert.deepEqual(
      after.map((m) => m.role),
      ['user', 'assistant', 'user', 'assistant', 'user', 'assistant'],
    );
    assert.equal(startId(fourth.chunks), after[5]!.id);
  });

  test('the raw answer: SSE with the v1 header, every data line valid for the schema, then [DONE]', async () => {
    const id = await session();
    h.fake.enqueue(text('Raw stream.'));
    const res = await fetch(`${h.service.url}/v1/chat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id, messages: [userMessage('raw')], trigger: 'submit-message' }),
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const data = sseDataLines(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const schema = uiMessageChunkSchema();
    for (const d of data.slice(0, -1)) {
      const checked = await schema.validate!(JSON.parse(d));
      assert.ok(checked.success, `${d}: ${JSON.stringify(checked)}`);
    }
  });

  test('an Idempotency-Key: the same request again streams the same answer and posts nothing twice', async () => {
    const id = await session();
    h.fake.enqueue(text('Said once.'));
    const post = (body: unknown) =>
      fetch(`${h.service.url}/v1/chat`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${KEY}`,
          'content-type': 'application/json',
          'idempotency-key': 'chat-once',
        },
        body: JSON.stringify(body),
      });
    const body = { id, messages: [userMessage('once')], trigger: 'submit-message' };
    const first = await post(body);
    assert.equal(first.status, 200);
    const firstData = sseDataLines(await first.text());
    const again = await post(body);
    assert.equal(again.status, 200);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(again.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
    const againData = sseDataLines(await again.text());
    // The same chunks (the ids of text parts are made per stream).
    const shape = (lines: string[]) => lines.map((l) => l.replace(/"id":"[^"]*"/g, '"id":"…"'));
    assert.deepEqual(shape(againData), shape(firstData));
    assert.ok(firstData.some((l) => l.includes('Said once.')));
    const users = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data.filter(
      (m: any) => m.role === 'user',
    );
    assert.equal(users.length, 1, 'the message was posted once');
    const other = await post({ ...body, messages: [userMessage('another')] });
    assert.equal(other.status, 422);
    assert.equal((await other.json()).error.code, 'idempotency_key_reused');
    // A replay needs the scopes the first request needed: a client token without `message` gets none of it.
    const minted = await h.api.post('/v1/client-tokens', { session_id: id, scopes: ['decide'] });
    const byToken = await fetch(`${h.service.url}/v1/chat`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${minted.body.token}`,
        'content-type': 'application/json',
        'idempotency-key': 'chat-once',
      },
      body: JSON.stringify(body),
    });
    assert.equal(byToken.status, 403);
    assert.equal((await byToken.json()).error.code, 'scope_denied');
  });

  test('an Idempotency-Key replay of a decision that started no run says the status it said then', async () => {
    const id = await session({ tools: ['get_weather'], approval: 'always' });
    h.fake.enqueue(
      toolCalls([
        toolUse('get_weather', { location: 'Paris' }, 'toolu_i1'),
        toolUse('get_weather', { location: 'Oslo' }, 'toolu_i2'),
      ]),
      text('Done.'),
    );
    const raw = (body: unknown, key?: string) =>
      fetch(`${h.service.url}/v1/chat`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${KEY}`,
          'content-type': 'application/json',
          ...(key ? { 'idempotency-key': key } : {}),
        },
        body: JSON.stringify(body),
      }).then(async (r) => ({ status: r.status, data: sseDataLines(await r.text()) }));
    await raw({ id, messages: [userMessage('weather?')], trigger: 'submit-message' });
    await h.api.waitStatus(id, 'requires_action');
    const approve = (toolCallId: string, location: string) => ({
      type: 'tool-get_weather',
      toolCallId,
      state: 'approval-responded',
      input: { location },
      approval: { id: toolCallId, approved: true },
    });
    const decision = {
      id,
      messages: [{ id: 'a1', role: 'assistant', parts: [approve('toolu_i1', 'Paris')] }],
      trigger: 'submit-message',
    };
    const first = await raw(decision, 'decide-once');
    assert.equal(first.status, 200);
    assert.ok(first.data.some((l) => l.includes('"tool-approval-request"') && l.includes('toolu_i2')));
    // The other call is approved elsewhere; the run ends. The replay still says what the first answer said.
    assert.equal(
      (await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_i2`, { decision: 'approve' })).status,
      202,
    );
    await h.api.waitStatus(id, 'idle');
    const again = await raw(decision, 'decide-once');
    assert.equal(again.status, 200);
    assert.deepEqual(again.data, first.data);
  });

  /**
   * A session whose reply calls get_weather twice (`a`, `b`), both waiting for approval, asked through the chat; and
   * a chat answer of its assistant message whose parts are `parts`: 400 `invalid_request` naming `refused`, nothing
   * applied (both calls still wait).
   */
  async function refusedAnswer(
    a: string,
    b: string,
    parts: (part: (toolCallId: string, approvalId: string, approved: boolean) => unknown) => unknown[],
    refused: string,
  ) {
    const id = await session({ tools: ['get_weather'], approval: 'always' });
    h.fake.enqueue(
      toolCalls([
        toolUse('get_weather', { location: 'Paris' }, a),
        toolUse('get_weather', { location: 'Oslo' }, b),
      ]),
    );
    const post = (body: unknown) =>
      fetch(`${h.service.url}/v1/chat`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    await (await post({ id, messages: [userMessage('weather?')], trigger: 'submit-message' })).text();
    const waiting = await h.api.waitStatus(id, 'requires_action');
    const part = (toolCallId: string, approvalId: string, approved: boolean) => ({
      type: 'tool-get_weather',
      toolCallId,
      state: 'approval-responded',
      input: { location: 'Paris' },
      approval: { id: approvalId, approved },
    });
    const res = await post({
      id,
      messages: [{ id: 'a1', role: 'assistant', parts: parts(part) }],
      trigger: 'submit-message',
    });
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.error.code, 'invalid_request');
    assert.deepEqual(body.error.details, { toolCallId: refused });
    // Nothing was applied: both calls still wait for a decision.
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.revision, waiting.revision, 'nothing applied');
    assert.deepEqual(s.required_action.tool_calls.map((c: { id: string }) => c.id).sort(), [a, b].sort());
  }

  test('one call answered twice in one message: 400 before anything is applied', () =>
    refusedAnswer(
      'toolu_d1',
      'toolu_d2',
      (part) => [
        part('toolu_d2', 'toolu_d2', true),
        part('toolu_d1', 'toolu_d1', true),
        part('toolu_d1', 'toolu_d1', false),
      ],
      'toolu_d1',
    ));

  test('an approval response whose approval id is not the one asked for its call: 400 before anything is applied', () =>
    refusedAnswer(
      'toolu_m1',
      'toolu_m2',
      (part) => [part('toolu_m1', 'toolu_m1', true), part('toolu_m2', 'toolu_m1', true)],
      'toolu_m2',
    ));

  test('If-Match: a stale revision is 412 and posts nothing, a malformed one 400; the current one posts, ETag its write', async () => {
    const id = await session();
    const post = (ifMatch: string, text: string, messageId?: string) =>
      fetch(`${h.service.url}/v1/chat`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'if-match': ifMatch },
        body: JSON.stringify({ id, messages: [userMessage(text, messageId)], trigger: 'submit-message' }),
      });
    const before = (await h.api.get(`/v1/sessions/${id}`)).body;
    const asked = h.fake.requests.length;
    const stale = await post(`"${before.revision + 5}"`, 'stale');
    assert.equal(stale.status, 412);
    assert.equal((await stale.json()).error.code, 'revision_mismatch');
    const malformed = await post('garbage', 'malformed');
    assert.equal(malformed.status, 400);
    assert.equal((await malformed.json()).error.code, 'invalid_request');
    const unchanged = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(unchanged.revision, before.revision, 'nothing was posted');
    assert.equal(h.fake.requests.length, asked, 'no run started');

    h.fake.enqueue(text('fresh answer'));
    const current = await post(`"${before.revision}"`, 'current', 'u-current');
    assert.equal(current.status, 200);
    const etag = Number(JSON.parse(current.headers.get('etag') ?? 'null'));
    await current.text();
    const events = (await h.api.get(`/v1/sessions/${id}/events`)).body.data;
    const queued = events.find((e: { type: string }) => e.type === 'message.queued');
    assert.equal(etag, queued.revision, 'the ETag is the revision of the write that posted the message');
    // The same message again (its answer lost), with the same If-Match: answered as the first, not 412; no ETag.
    const again = await post(`"${before.revision}"`, 'current', 'u-current');
    assert.equal(again.status, 200);
    assert.equal(again.headers.get('etag'), null);
    await again.text();
    const after = (await h.api.get(`/v1/sessions/${id}/events`)).body.data;
    assert.equal(after.filter((e: { type: string }) => e.type === 'message.queued').length, 1, 'posted once');
  });

  test('a server tool (get_weather): its call and output in the first step, the answer in the second', async () => {
    const id = await session({ tools: ['get_weather'] });
    const { chunks, message } = await readAll(await send(id, [userMessage('What is the weather in Paris?')]));
    assert.deepEqual(
      types(chunks).filter((t) => t.startsWith('tool-') || t.endsWith('-step')),
      [
        'start-step',
        'tool-input-start',
        'tool-input-delta',
        'tool-input-delta',
        'tool-input-available',
        'tool-output-available',
        'finish-step',
        'start-step',
        'finish-step',
      ],
    );
    const tool = message?.parts.find((p) => p.type === 'tool-get_weather');
    assert.ok(tool && tool.type === 'tool-get_weather');
    assert.equal(tool.state, 'output-available');
    assert.deepEqual(tool.input, { location: 'Paris' });
    assert.match(String(tool.output), /Simulated weather in Paris/);
    assert.match(textOf(message), /The weather in Paris is/);
    const msgs = await history(id);
    assert.equal(msgs.length, 2, 'one assistant message for the whole run');
    const past = msgs[1]!.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(past && 'state' in past && past.state, 'output-available');
    assert.equal(msgs[1]!.parts.filter((p) => p.type === 'step-start').length, 2);
  });

  test('regenerate (Chat.regenerate()): the whole answer is made again, under its id; the history says the same', async () => {
    const id = await session({ tools: ['get_weather'] });
    h.fake.enqueue(
      reply([toolUse('get_weather', { location: 'Paris' }, 'toolu_regen1')]),
      text('First answer.'),
      text('Second answer.'),
    );
    const chat = new PlainChat({ id, transport: transport() });
    const first = chat.nextFinish();
    await chat.sendMessage({ text: 'Weather in Paris?' });
    await first;
    const answerId = chat.messages[1]!.id;
    assert.equal(textOf(chat.messages[1]), 'First answer.');
    assert.equal((await history(id))[1]!.id, answerId);
    const sent = h.fake.requests.length;

    const again = chat.nextFinish();
    await chat.regenerate();
    await again;
    assert.equal(chat.messages.length, 2);
    assert.equal(chat.messages[1]!.id, answerId, 'the new answer takes the id of the one it replaces');
    assert.equal(textOf(chat.messages[1]), 'Second answer.');
    assert.ok(!chat.messages[1]!.parts.some((p) => p.type === 'tool-get_weather'), 'the old steps are gone');
    // The model was asked again from the user's message alone: the whole answer, not its last step.
    assert.equal(h.fake.requests.length, sent + 1);
    assert.equal(h.fake.requests.at(-1)!.messages.length, 1);
    const msgs = await history(id);
    assert.deepEqual(
      msgs.map((m) => [m.role, textOf(m)]),
      chat.messages.map((m) => [m.role, textOf(m)]),
    );
    assert.equal(msgs[1]!.id, answerId);
    // Regenerating by the user message's id (the client's own) makes the answer after it again.
    h.fake.enqueue(text('Third answer.'));
    const third = chat.nextFinish();
    await chat.regenerate({ messageId: chat.messages[0]!.id });
    await third;
    assert.equal(textOf((await history(id))[1]), 'Third answer.');
    // The records of the dropped turns went with them: one record, the new answer's.
    const records = (await h.api.get(`/v1/sessions/${id}/iterations`)).body.data;
    assert.equal(records.length, 1);
    assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.iteration, 1);
    // Only the newest answer: naming an older one (or a view another tab has moved past) cuts nothing.
    h.fake.enqueue(text('Oslo answer.'));
    const oslo = chat.nextFinish();
    await chat.sendMessage({ text: 'And Oslo?' });
    await oslo;
    const before = await history(id);
    assert.equal(before.length, 4);
    const older = await h.api.post(
      '/v1/chat',
      { id, messages: [chat.messages[0]], trigger: 'regenerate-message', messageId: answerId },
      { 'content-type': 'application/json' },
    );
    assert.equal(older.status, 409, JSON.stringify(older.body));
    assert.equal(older.body.error.code, 'nothing_to_retry');
    const stale = await h.api.post(
      '/v1/chat',
      { id, messages: [chat.messages[0]], trigger: 'regenerate-message' },
      { 'content-type': 'application/json' },
    );
    assert.equal(stale.status, 409);
    assert.deepEqual(await history(id), before);
  });

  test('regenerate while the session waits for the client: 409, nothing cut', async () => {
    const lookup = {
      name: 'lookup',
      description: 'a client tool',
      input_schema: { type: 'object', properties: {} },
    };
    const id = await session({ tools: [lookup] });
    h.fake.enqueue(reply([toolUse('lookup', {}, 'toolu_regen_wait')]));
    await h.api.post(`/v1/sessions/${id}/messages`, { content: 'Look it up.' });
    await h.api.waitStatus(id, 'requires_action');
    const before = await history(id);
    const r = await h.api.post(
      '/v1/chat',
      { id, messages: [userMessage('Look it up.')], trigger: 'regenerate-message' },
      { 'content-type': 'application/json' },
    );
    assert.equal(r.status, 409, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'session_not_replaceable');
    assert.deepEqual(await history(id), before);
  });

  test('an approval round trip with Chat: approval-requested, addToolApprovalResponse, the run goes on', async () => {
    const id = await session({ tools: ['get_weather'], approval: 'always' });
    const chat = new PlainChat({
      id,
      transport: transport(),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text: 'What is the weather in Paris?' });
    const asked = chat.messages.at(-1)!;
    const part = asked.parts.find((p) => p.type === 'tool-get_weather');
    assert.ok(part && part.type === 'tool-get_weather');
    assert.equal(part.state, 'approval-requested');
    assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'requires_action');
    // The history shows the same pending approval (a page reloaded at this point).
    const pending = (await history(id))[1]!.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(pending && 'state' in pending && pending.state, 'approval-requested');

    const finished = chat.nextFinish();
    await chat.addToolApprovalResponse({ id: part.approval!.id, approved: true });
    assert.match(textOf(await finished), /The weather in Paris is/);
    const done = chat.messages.at(-1)!;
    assert.equal(chat.messages.length, 2, 'the answer continues the same assistant message');
    const ran = done.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(ran && 'state' in ran && ran.state, 'output-available');
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'idle');
    const events = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
    const decided = events.filter((e: { type: string }) => e.type === 'tool_call.decided');
    assert.deepEqual(
      decided.map((e: { data: { decision: string } }) => e.data.decision),
      ['approve'],
    );
  });

  test('two approvals answered in one message: one stream, the run goes on to its answer', async () => {
    const id = await session({ tools: ['get_weather'], approval: 'always' });
    h.fake.enqueue(
      toolCalls([
        toolUse('get_weather', { location: 'Paris' }, 'toolu_w1'),
        toolUse('get_weather', { location: 'Tokyo' }, 'toolu_w2'),
      ]),
      text('Both are sunny.'),
    );
    const chat = new PlainChat({
      id,
      transport: transport(),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text: 'What is the weather in Paris and Tokyo?' });
    const parts = chat.messages.at(-1)!.parts.filter((p) => p.type === 'tool-get_weather');
    assert.equal(parts.length, 2);
    const finished = chat.nextFinish();
    // Both answered before the message is sent (sendAutomaticallyWhen waits for the last one): one POST, two decisions.
    for (const p of parts) {
      assert.ok(p.type === 'tool-get_weather' && p.approval);
      await chat.addToolApprovalResponse({ id: p.approval.id, approved: true });
    }
    assert.equal(textOf(await finished), 'Both are sunny.');
    const ran = chat.messages.at(-1)!.parts.filter((p) => p.type === 'tool-get_weather');
    assert.deepEqual(
      ran.map((p) => 'state' in p && p.state),
      ['output-available', 'output-available'],
    );
    assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'idle');
  });

  test('a user message while the session waits for an approval: queued, and the stream says what it waits for', async () => {
    const id = await session({ tools: ['get_weather'], approval: 'always' });
    const first = await readAll(await send(id, [userMessage('What is the weather in Paris?')]));
    const asked = first.chunks.find((c) => c.type === 'tool-approval-request');
    assert.ok(asked);
    const { chunks } = await readAll(await send(id, [userMessage('And in Tokyo?')]));
    assert.deepEqual(types(chunks), ['start', 'tool-input-available', 'tool-approval-request', 'finish']);
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'requires_action');
    const events = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
    assert.ok(events.some((e: { type: string }) => e.type === 'message.queued'));
  });

  test('a client token without `read`: what it posts is done, its answer shows nothing of the run', async () => {
    const id = await session({ tools: ['get_weather'], approval: 'always' });
    const first = await readAll(await send(id, [userMessage('What is the weather in Paris?')]));
    const asked = first.chunks.find((c) => c.type === 'tool-approval-request');
    const call = first.chunks.find((c) => c.type === 'tool-input-available');
    assert.ok(asked?.type === 'tool-approval-request' && call?.type === 'tool-input-available');
    const mint = async (scopes: string[]) =>
      (await h.api.post('/v1/client-tokens', { session_id: id, scopes })).body.token as string;
    // A `decide`-only token answers the approval through the AI SDK's transport: a valid stream of `start` (the
    // assistant message it continues, its own id) and `finish`, nothing of the tool's output or the model's text.
    const approval: UIMessage = {
      id: 'a-approve',
      role: 'assistant',
      parts: [
        {
          type: 'tool-get_weather',
          toolCallId: call.toolCallId,
          state: 'approval-responded',
          input: call.input,
          approval: { id: asked.approvalId, approved: true },
        },
      ],
    };
    const decided = await readAll(
      await chatTransport(h.service.url, await mint(['decide'])).sendMessages({
        chatId: id,
        messages: [approval],
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: undefined,
      }),
    );
    assert.deepEqual(decided.chunks, [{ type: 'start', messageId: 'a-approve' }, { type: 'finish' }]);
    assert.deepEqual(decided.message?.parts, []);
    // The decision was made: the run goes on to its answer, which a reader sees.
    await h.api.waitStatus(id, 'idle');
    assert.match(textOf((await history(id)).at(-1)), /The weather in Paris is/);

    // A `message`-only token: its message is posted (once, with an Idempotency-Key replayed the same way).
    h.fake.enqueue(text('Not for a writer only.'));
    const writer = await mint(['message']);
    const post = (key?: string) =>
      fetch(`${h.service.url}/v1/chat`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${writer}`,
          'content-type': 'application/json',
          ...(key ? { 'idempotency-key': key } : {}),
        },
        body: JSON.stringify({
          id,
          messages: [userMessage('Thanks', 'u-thanks')],
          trigger: 'submit-message',
        }),
      });
    // The third, without a key, is the same message sent again (found posted, not by its key): the same answer.
    for (const res of [await post('write-only'), await post('write-only'), await post()]) {
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
      const data = sseDataLines(await res.text());
      assert.deepEqual(data, ['{"type":"start"}', '{"type":"finish"}', '[DONE]']);
      for (const d of data.slice(0, -1))
        assert.ok((await uiMessageChunkSchema().validate!(JSON.parse(d))).success, d);
    }
    await h.api.waitStatus(id, 'idle');
    const msgs = await history(id);
    assert.equal(msgs.filter((m) => m.role === 'user' && textOf(m) === 'Thanks').length, 1);
    assert.equal(textOf(msgs.at(-1)), 'Not for a writer only.');
  });

  test('a denial through Chat: the call is denied with its reason, the model answers without it', async () => {
    const id = await session({ tools: ['get_weather'], approval: 'always' });
    const chat = new PlainChat({
      id,
      transport: transport(),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text: 'What is the weather in Paris?' });
    const part = chat.messages.at(-1)!.parts.find((p) => p.type === 'tool-get_weather');
    assert.ok(part && part.type === 'tool-get_weather' && part.approval);
    const finished = chat.nextFinish();
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: false, reason: 'not now' });
    await finished;
    assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'idle');
    const denied = chat.messages.at(-1)!.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(denied && 'state' in denied && denied.state, 'output-denied');
    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const result = msgs[2].content.find((b: { type: string }) => b.type === 'tool_result');
    assert.equal(result.is_error, true);
    assert.match(JSON.stringify(result.content), /not now/);
  });

  test('a client tool output with Chat: input-available, addToolOutput, the result reaches the model', async () => {
    const id = await session({ tools: [lookupOrder] });
    const calls: string[] = [];
    const chat: PlainChat = new PlainChat({
      id,
      transport: transport(),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
      onToolCall: ({ toolCall }) => {
        calls.push(toolCall.toolName);
        void chat.addToolOutput({
          tool: 'lookup_order',
          toolCallId: toolCall.toolCallId,
          output: { status: 'shipped', order_id: '4711' },
        });
      },
    });
    // The call's response, then the one that sends the output onToolCall added (by itself).
    const both = chat.nextFinish(2);
    await chat.sendMessage({ text: 'Where is my order 4711?' });
    await both;
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'idle');
    assert.equal(s.iteration, 2);
    assert.deepEqual(calls, ['lookup_order'], 'onToolCall once');
    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const result = msgs[2].content.find((b: { type: string }) => b.type === 'tool_result');
    assert.deepEqual(JSON.parse(result.content), { status: 'shipped', order_id: '4711' });
    const ui = await history(id);
    const part = ui[1]!.parts.find((p) => p.type === 'tool-lookup_order');
    assert.equal(part && 'state' in part && part.state, 'output-available');
  });

  test('resume mid-stream: reconnectToStream replays the run from its start to its end; 204 once idle', async () => {
    const id = await session();
    const long = Array.from({ length: 30 }, (_, i) => `word${i}`).join(' ');
    h.fake.enqueue(text(long, { eventDelayMs: 40 }));
    const abort = new AbortController();
    const first = await transport().sendMessages({
      chatId: id,
      messages: [userMessage('tell me a long story')],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: abort.signal,
    });
    const reader = first.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      assert.ok(!done, 'the stream ended before its first text-delta');
      if (value.type === 'text-delta') break;
    }
    abort.abort();
    await reader.cancel().catch(() => {});
    const resumed = await transport().reconnectToStream({ chatId: id });
    assert.ok(resumed, 'a run is active');
    const { chunks, message } = await readAll(resumed);
    assert.equal(chunks[0]?.type, 'start');
    assert.equal(chunks.filter((c) => c.type === 'start-step').length, 1);
    assert.equal(chunks.at(-1)?.type, 'finish');
    assert.equal(textOf(message), long, 'the whole text, from the start of the run');
    await h.api.waitStatus(id, 'idle');
    assert.equal(await transport().reconnectToStream({ chatId: id }), null, '204: no run');
  });

  test('resume after an approval: the replay holds the whole assistant message, the pause included', async () => {
    const id = await session({ tools: ['get_weather'], approval: 'always' });
    const long = Array.from({ length: 30 }, (_, i) => `sunny${i}`).join(' ');
    h.fake.enqueue(toolCall('get_weather', { location: 'Paris' }), text(long, { eventDelayMs: 40 }));
    const user = userMessage('What is the weather in Paris?');
    const asked = await readAll(await send(id, [user]));
    const call = asked.message!.parts.find((p) => p.type === 'tool-get_weather');
    assert.ok(call && call.type === 'tool-get_weather' && call.state === 'approval-requested');
    // What addToolApprovalResponse leaves in the message, sent as useChat sends it.
    const answered: UIMessage = {
      ...asked.message!,
      parts: asked.message!.parts.map((p) =>
        p === call
          ? { ...call, state: 'approval-responded', approval: { id: call.approval.id, approved: true } }
          : p,
      ),
    };
    const abort = new AbortController();
    const going = await transport().sendMessages({
      chatId: id,
      messages: [user, answered],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: abort.signal,
    });
    const reader = going.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      assert.ok(!done, 'the stream ended before its first text-delta');
      if (value.type === 'text-delta') break;
    }
    abort.abort();
    await reader.cancel().catch(() => {});
    const resumed = await transport().reconnectToStream({ chatId: id });
    assert.ok(resumed);
    const { chunks, message } = await readAll(resumed);
    assert.equal(chunks.filter((c) => c.type === 'start').length, 1);
    assert.equal(chunks.filter((c) => c.type === 'finish').length, 1, 'the pause does not end the replay');
    assert.ok(types(chunks).includes('tool-approval-request'));
    const ran = message?.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(ran && 'state' in ran && ran.state, 'output-available');
    assert.equal(message?.parts.filter((p) => p.type === 'step-start').length, 2);
    assert.equal(textOf(message), long);
  });

  test('a dropped turn (interrupt): reset-step and data-turn-dropped, its partial text gone', async () => {
    const id = await session();
    h.fake.enqueue(
      text('This partial answer will be dropped.', { hangAfterEvents: 4 }),
      text('The new answer.'),
    );
    const stream = await send(id, [userMessage('first question')]);
    const [a, b] = stream.tee();
    const read = readAll(b);
    const reader = a.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      assert.ok(!done, 'the stream ended before its first text-delta');
      if (value.type === 'text-delta') break;
    }
    void (async () => {
      while (!(await reader.read()).done);
    })();
    const r = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'second question', interrupt: true });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const { chunks, message } = await read;
    const at = types(chunks).indexOf('reset-step');
    assert.ok(at > 0, types(chunks).join(','));
    const marker = chunks[at + 1];
    assert.ok(marker && marker.type === 'data-turn-dropped');
    assert.deepEqual(marker.data, { iteration: 1, reason: 'interrupt' });
    assert.equal(textOf(message), 'The new answer.');
    assert.equal(message?.parts.filter((p) => p.type === 'step-start').length, 1);
  });

  test('refusals: bad bodies 400, unknown or foreign sessions 404, no key 401, regenerate of no answer 409', async () => {
    const id = await session();
    const post = (body: unknown, key = KEY) =>
      h.api.as(key).post('/v1/chat', body, { 'content-type': 'application/json' });
    const cases: Array<[unknown, number, string]> = [
      [{ id, messages: [] }, 400, 'invalid_request'],
      [{ id: 'no pe', messages: [userMessage('x')] }, 400, 'invalid_request'],
      [{ id: 'nope', messages: [userMessage('x')] }, 404, 'session_not_found'],
      [{ id, messages: [{ id: 'x', role: 'user', parts: 'no' }] }, 400, 'invalid_request'],
      [{ id, messages: Array.from({ length: 1001 }, () => userMessage('x')) }, 400, 'invalid_request'],
      [
        { id, messages: [{ id: 'x', role: 'user', parts: [{ type: 'text', text: '' }] }] },
        400,
        'invalid_request',
      ],
      [
        { id, messages: [{ id: 'x', role: 'user', parts: [{ type: 'text', text: ' \n ' }] }] },
        400,
        'invalid_request',
      ],
      [{ id, messages: [userMessage('x')], trigger: 'regenerate-message' }, 409, 'nothing_to_retry'],
      [{ id, messages: [userMessage('x', 'm1')], messageId: 'm1' }, 400, 'invalid_request'],
      [
        { id, messages: [{ id: 'a', role: 'assistant', parts: [{ type: 'text', text: 'hi' }] }] },
        400,
        'invalid_request',
      ],
      [{ id: 'ses_doesnotexist000', messages: [userMessage('x')] }, 404, 'session_not_found'],
    ];
    for (const [body, status, code] of cases) {
      const r = await post(body);
      assert.equal(r.status, status, `${JSON.stringify(body).slice(0, 200)} → ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, code);
    }
    const foreign = await post({ id, messages: [userMessage('x')] }, OTHER);
    assert.equal(foreign.status, 404);
    assert.equal(foreign.body.error.code, 'session_not_found');
    for (const path of [`/v1/chat/${id}/stream`, `/v1/chat/${id}/messages`]) {
      assert.equal((await h.api.as(OTHER).get(path)).status, 404, path);
      assert.equal((await h.api.get(path.replace(id, 'not.a.session'))).status, 400, path);
      assert.equal((await h.api.get(path.replace(id, 'not-a-session'))).status, 404, path);
      assert.equal((await fetch(h.service.url + path)).status, 401, path);
    }
    assert.equal((await h.api.get(`/v1/chat/${id}/stream`)).status, 204);
    const big = await post({ id, messages: [userMessage('x'.repeat(1_100_000))] });
    assert.equal(big.status, 413);
  });

  test('the OpenAPI document declares the chat routes with their statuses', async () => {
    const doc = (await h.api.get('/docs/json')).body;
    assert.deepEqual(Object.keys(doc.paths['/v1/chat'].post.responses).sort(), [
      '200',
      '400',
      '401',
      '403',
      '404',
      '409',
      '412',
      '413',
      '415',
      '421',
      '422',
      '429',
      '500',
      '503',
    ]);
    assert.ok(doc.paths['/v1/chat/{id}/stream'].get.responses['204']);
    assert.ok(doc.paths['/v1/chat/{id}/messages'].get.responses['200']);
    for (const op of [doc.paths['/v1/chat'].post, doc.paths['/v1/chat/{id}/stream'].get])
      assert.deepEqual(op.responses['200'].headers['x-vercel-ai-ui-message-stream'], {
        $ref: '#/components/headers/UiMessageStream',
      });
  });

  test('a session with "stream": false: each turn rendered from its turn.completed message', async () => {
    const id = await session({ stream: false, tools: ['get_weather'] });
    const { chunks, message } = await readAll(await send(id, [userMessage('What is the weather in Paris?')]));
    assert.ok(types(chunks).includes('text-delta'));
    assert.equal(message?.parts.filter((p) => p.type === 'step-start').length, 2);
    const tool = message?.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(tool && 'state' in tool && tool.state, 'output-available');
    // Each text exactly once: the stream's message says what the history says.
    const msgs = await history(id);
    assert.match(textOf(msgs[1]), /^Let me check the weather in Paris\.The weather in Paris is/);
    assert.equal(textOf(message), textOf(msgs[1]));
    const deltas = chunks.filter((c) => c.type === 'text-delta');
    assert.equal(new Set(deltas.map((c) => c.id)).size, deltas.length, 'one text-delta per text block');
  });

  test('a failed run: an error chunk with the code, then finish (error)', async () => {
    const id = await session();
    h.fake.enqueue(apiError(400, 'invalid_request_error', { message: 'prompt is too long' }));
    const { chunks } = await readAll(await send(id, [userMessage('fail please')]));
    assert.deepEqual(types(chunks), ['start', 'start-step', 'error', 'finish-step', 'finish']);
    const [err, , end] = chunks.slice(-3);
    assert.ok(err && err.type === 'error');
    assert.match(err.errorText, /^upstream_\w+: /);
    assert.ok(end && end.type === 'finish');
    assert.equal(end.finishReason, 'error');
    assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'failed');
  });

  test('a hung upstream: the chat stream stays open and ends when the run is cancelled', async () => {
    const id = await session();
    h.fake.enqueue(hang());
    const stream = await send(id, [userMessage('hang')]);
    await h.api.waitFor(id, (s) => s.status === 'running');
    const read = readAll(stream);
    const r = await h.api.post(`/v1/sessions/${id}/cancel`);
    assert.equal(r.status < 300, true, JSON.stringify(r.body));
    const { chunks } = await read;
    const end = chunks.at(-1);
    assert.ok(end && end.type === 'finish');
    assert.equal(end.finishReason, 'interrupted');
  });

  test("a sub-agent call is the service's: the stream stays open through the child's work, onToolCall never fires", async () => {
    h.fake.setHandler(writerResearcher);
    try {
      const { system, tools } = writerWithResearcher;
      const id = await session({ system, tools });
      let toolCalls = 0;
      const chat = new PlainChat({ id, transport: transport(), onToolCall: () => void toolCalls++ });
      await chat.sendMessage({ text: 'Write about the sky.' });
      // One response, to the end of the run: the parent's pause for its child did not end it.
      assert.equal(chat.status, 'ready');
      assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'idle');
      assert.equal(toolCalls, 0, 'onToolCall is for client tools');
      const answer = chat.messages.at(-1)!;
      const call = answer.parts.find((p) => p.type === 'tool-researcher');
      assert.ok(call && call.type === 'tool-researcher');
      assert.equal(call.state, 'output-available');
      assert.equal(call.providerExecuted, true);
      assert.match(String(call.output), /Rayleigh scattering/);
      assert.match(textOf(answer), /^Article, from the research \(error: false\)/);
      const past = (await history(id))[1]!.parts.find((p) => p.type === 'tool-researcher');
      assert.ok(past && past.type === 'tool-researcher');
      assert.equal(past.state, 'output-available');
      assert.equal(past.providerExecuted, true);
    } finally {
      h.fake.setHandler(null);
    }
  });

  test('resume while a sub-agent works: the run is active, the replay goes on to its end', async () => {
    // The researcher's reply is held mid-stream until the test lets it go: the parent waits for it meanwhile.
    h.fake.setHandler((req) => {
      const r = writerResearcher(req);
      return JSON.stringify(req.body.system ?? '').includes('researcher') ? { ...r, pauseAfterEvents: 3 } : r;
    });
    try {
      const { system, tools } = writerWithResearcher;
      const held = h.fake.requests.length + 2;
      const id = await session({ system, tools, input: 'Write about the sky.', start: true });
      await h.fake.waitForRequests(held);
      const parent = (await h.api.get(`/v1/sessions/${id}`)).body;
      assert.equal(parent.status, 'requires_action');
      assert.equal(parent.required_action.type, 'submit_tool_results');
      const resumed = await transport().reconnectToStream({ chatId: id });
      assert.ok(resumed, 'a run waiting for its sub-agent is active');
      h.fake.resume();
      const { chunks, message } = await readAll(resumed);
      assert.equal(chunks.filter((c) => c.type === 'finish').length, 1);
      const end = chunks.at(-1);
      assert.equal(end?.type === 'finish' && end.finishReason, 'stop');
      const call = message?.parts.find((p) => p.type === 'tool-researcher');
      assert.equal(call && 'state' in call && call.state, 'output-available');
      assert.match(textOf(message), /^Article, from the research/);
      const start = chunks[0];
      assert.equal(start?.type === 'start' && start.messageId, (await history(id))[1]!.id);
    } finally {
      h.fake.setHandler(null);
    }
  });

  test("a reload mid-run: the resumed stream continues the history's assistant message, no second one", async () => {
    const id = await session({ tools: ['get_weather'], input: 'weather?', start: true });
    const long = Array.from({ length: 20 }, (_, i) => `w${i}`).join(' ');
    const held = h.fake.requests.length + 2;
    h.fake.enqueue(
      reply([textBlock('Checking.'), toolUse('get_weather', { location: 'Paris' })]),
      text(long, { pauseAfterEvents: 4 }),
    );
    await h.fake.waitForRequests(held);
    // The page loads: the history, then the replay of the run in progress.
    const initial = await history(id);
    assert.deepEqual(
      initial.map((m) => m.role),
      ['user', 'assistant'],
    );
    const chat = await reloaded(id, initial);
    assert.deepEqual(
      chat.messages.map((m) => [m.id, m.role]),
      initial.map((m) => [m.id, m.role]),
      'the same two messages',
    );
    assert.equal(textOf(chat.messages[1]), `Checking.${long}`);
    const tool = chat.messages[1]!.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(tool && 'state' in tool && tool.state, 'output-available');
    await h.api.waitStatus(id, 'idle');
    // As JSON (the Chat leaves `metadata: undefined` on a message a stream wrote).
    assert.deepEqual(JSON.parse(JSON.stringify(chat.messages)), await history(id));
  });

  /**
   * A session whose first step (a text and a call) is recorded, then the steps of `later` (calls too), and whose next
   * one fails upstream, taken up again by `POST …/<how>`: its new turn is held mid-stream (a reload comes next).
   */
  async function failedAfterAStep(how: 'resume' | 'retry', later: FakeMessageReply[] = []) {
    const long = Array.from({ length: 20 }, (_, i) => `w${i}`).join(' ');
    h.fake.enqueue(
      reply([textBlock('Checking.'), toolUse('get_weather', { location: 'Paris' })]),
      ...later,
      apiError(400, 'invalid_request_error'),
    );
    const id = await session({ tools: ['get_weather'], input: 'weather?', start: true });
    await h.api.waitStatus(id, 'failed');
    const held = h.fake.requests.length + 1;
    h.fake.enqueue(text(long, { pauseAfterEvents: 4 }));
    assert.equal((await h.api.post(`/v1/sessions/${id}/${how}`, {})).status, 202);
    await h.fake.waitForRequests(held);
    return { id, long };
  }

  test('a reload after a failed step was resumed: the replay carries the steps before the failure', async () => {
    const { id, long } = await failedAfterAStep('resume');
    // The page loads: the history (the step before the failure), then the replay of the run in progress.
    const initial = await history(id);
    assert.deepEqual(
      initial.map((m) => m.role),
      ['user', 'assistant'],
    );
    const chat = await reloaded(id, initial);
    assert.equal(chat.error, undefined);
    assert.equal(textOf(chat.messages[1]), `Checking.${long}`);
    const tool = chat.messages[1]!.parts.find((p) => p.type === 'tool-get_weather');
    assert.equal(tool && 'state' in tool && tool.state, 'output-available');
    await h.api.waitStatus(id, 'idle');
    assert.deepEqual(JSON.parse(JSON.stringify(chat.messages)), await history(id));
  });

  test('a reload after a failed step was retried: the replay shows what the history holds, not the dropped step', async () => {
    // The retry drops the last recorded turn (the call) and sends it again.
    const { id, long } = await failedAfterAStep('retry');
    const chat = await reloaded(id, await history(id));
    assert.equal(chat.error, undefined);
    await h.api.waitStatus(id, 'idle');
    assert.deepEqual(JSON.parse(JSON.stringify(chat.messages)), await history(id));
    assert.equal(textOf(chat.messages[1]), long);
  });

  test('a reload after a retry dropped the last of several steps: the replay carries the steps the history kept', async () => {
    // The retry drops the second step (the London call) and sends its turn again; the first step stays.
    const { id, long } = await failedAfterAStep('retry', [toolCall('get_weather', { location: 'London' })]);
    const locations = (m: UIMessage | undefined) =>
      (m?.parts ?? []).flatMap((p) =>
        p.type === 'tool-get_weather' ? [(p.input as { location: string }).location] : [],
      );
    const initial = await history(id);
    assert.deepEqual(locations(initial[1]), ['Paris']);
    const chat = await reloaded(id, initial);
    assert.equal(chat.error, undefined);
    // The replay replaces the message whole: the kept step, then the retry's, and not the dropped one.
    assert.equal(textOf(chat.messages[1]), `Checking.${long}`);
    assert.deepEqual(locations(chat.messages[1]), ['Paris']);
    assert.deepEqual(
      chat.messages[1]!.parts.map((p) => p.type),
      ['step-start', 'text', 'tool-get_weather', 'step-start', 'text'],
    );
    await h.api.waitStatus(id, 'idle');
    assert.deepEqual(JSON.parse(JSON.stringify(chat.messages)), await history(id));
  });

  test('a reload after a follow-up joined the run: the replay is the answer to the follow-up alone', async () => {
    const long = Array.from({ length: 20 }, (_, i) => `w${i}`).join(' ');
    // The follow-up is queued while the first reply is held, so it joins the tool results of that reply's step.
    h.fake.enqueue(
      reply([textBlock('Checking.'), toolUse('get_weather', { location: 'Paris' })], { pauseAfterEvents: 2 }),
      text(long, { pauseAfterEvents: 4 }),
    );
    const base = h.fake.requests.length;
    const id = await session({ tools: ['get_weather'], input: 'weather?', start: true });
    await h.fake.waitForRequests(base + 1);
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'and Rome?' })).status, 202);
    h.fake.resume();
    await h.fake.waitForRequests(base + 2);
    const initial = await history(id);
    assert.deepEqual(
      initial.map((m) => m.role),
      ['user', 'assistant', 'user'],
    );
    const chat = await reloaded(id, initial);
    assert.equal(chat.error, undefined);
    await h.api.waitStatus(id, 'idle');
    assert.deepEqual(JSON.parse(JSON.stringify(chat.messages)), await history(id));
    assert.equal(textOf(chat.messages[3]), long);
  });

  test('a reply stopped at max_tokens: its call ends output-error as in the history, never reaches onToolCall', async () => {
    for (const stream of [true, false]) {
      const id = await session({ tools: [lookupOrder], stream });
      h.fake.enqueue(
        reply([textBlock('Let me look'), toolUse('lookup_order', { order_id: '1' })], {
          stop_reason: 'max_tokens',
        }),
      );
      let toolCalls = 0;
      const chat: PlainChat = new PlainChat({
        id,
        transport: transport(),
        sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
        onToolCall: ({ toolCall }) => {
          toolCalls++;
          void chat.addToolOutput({
            tool: 'lookup_order',
            toolCallId: toolCall.toolCallId,
            output: { status: 'shipped' },
          });
        },
      });
      await chat.sendMessage({ text: 'Where is order 1?' });
      assert.equal(toolCalls, 0, 'the service answers the call: the client never runs it');
      assert.equal(chat.error, undefined);
      assert.equal(chat.status, 'ready');
      const part = chat.messages.at(-1)!.parts.find((p) => p.type === 'tool-lookup_order');
      assert.ok(part && part.type === 'tool-lookup_order');
      assert.equal(part.state, 'output-error');
      assert.equal(part.errorText, 'Error: not run: the reply stopped with max_tokens');
      const past = (await history(id))[1]!.parts.find((p) => p.type === 'tool-lookup_order');
      assert.ok(past && past.type === 'tool-lookup_order' && past.state === 'output-error');
      assert.equal(past.errorText, part.errorText);
      const s = (await h.api.get(`/v1/sessions/${id}`)).body;
      assert.deepEqual([s.status, s.stop_reason, s.message_count], ['idle', 'max_tokens', 3]);
    }
  });

  test('a cancel mid-text: the open text ends, the dropped reply is reset, then finish (interrupted)', async () => {
    const id = await session();
    h.fake.enqueue(text('Partial text that the cancel drops.', { hangAfterEvents: 5 }));
    const stream = await send(id, [userMessage('go')]);
    const [a, b] = stream.tee();
    const read = readAll(b);
    const reader = a.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      assert.ok(!done, 'the stream ended before its first text-delta');
      if (value.type === 'text-delta') break;
    }
    void (async () => {
      while (!(await reader.read()).done);
    })();
    assert.equal((await h.api.post(`/v1/sessions/${id}/cancel`)).status < 300, true);
    const { chunks, message } = await read;
    assert.deepEqual(shape(chunks).slice(-5), [
      'text-end',
      'reset-step',
      'data-turn-dropped',
      'finish-step',
      'finish',
    ]);
    const marker = chunks.find((c) => c.type === 'data-turn-dropped');
    assert.ok(marker && marker.type === 'data-turn-dropped');
    assert.deepEqual(marker.data, { iteration: 1, reason: 'cancelled' });
    const end = chunks.at(-1);
    assert.equal(end?.type === 'finish' && end.finishReason, 'interrupted');
    assert.equal(textOf(message), '', 'the history keeps no partial reply, nor does the message');
    assert.deepEqual(
      (await history(id)).map((m) => m.role),
      ['user'],
    );
  });

  test('an edit (sendMessage with messageId) is refused: the session keeps its conversation', async () => {
    const id = await session();
    h.fake.enqueue(text('A1'));
    const chat = new PlainChat({ id, transport: transport() });
    await chat.sendMessage({ text: 'first' });
    await chat.sendMessage({ text: 'first, edited', messageId: chat.messages[0]!.id });
    assert.equal(chat.status, 'error');
    assert.match(chat.error?.message ?? '', /invalid_request.*messageId.*PUT \/v1\/sessions\/:id\/messages/);
    const msgs = await history(id);
    assert.deepEqual(
      msgs.map((m) => textOf(m)),
      ['first', 'A1'],
    );
  });

  test('the same request sent again (a retry after a crash) posts its message once and streams its run', async () => {
    const id = await session();
    h.fake.enqueue(text('Only once.'));
    const first = await readAll(await send(id, [userMessage('hello once', 'u1')]));
    assert.equal(textOf(first.message), 'Only once.');
    // What a client that lost the first answer (its replica died mid-stream) sends: the very same body, to any
    // replica. Nothing is posted again; the answer is the run that message started, as the first one streamed it.
    const again = await readAll(await send(id, [userMessage('hello once', 'u1')]));
    assert.deepEqual(shape(again.chunks), shape(first.chunks));
    assert.equal(textOf(again.message), 'Only once.');
    const queued = async () =>
      (await h.api.get(`/v1/sessions/${id}/events?limit=500`)).body.data.filter(
        (e: { type: string }) => e.type === 'message.queued',
      ).length;
    assert.equal(await queued(), 1);
    assert.deepEqual(
      (await history(id)).map((m) => [m.role, textOf(m)]),
      [
        ['user', 'hello once'],
        ['assistant', 'Only once.'],
      ],
    );
    // The same id with other content is an edit: refused as one, nothing posted.
    const edited = await h.api.post('/v1/chat', {
      id,
      messages: [userMessage('hello, edited', 'u1')],
      trigger: 'submit-message',
    });
    assert.equal(edited.status, 400);
    assert.equal(edited.body.error.code, 'invalid_request');
    assert.match(edited.body.error.message, /PUT \/v1\/sessions\/:id\/messages/);
    assert.equal(await queued(), 1);
    // A new message of the chat is posted as usual.
    h.fake.enqueue(text('Second.'));
    const next = await readAll(
      await send(id, [userMessage('hello once', 'u1'), first.message!, userMessage('and again', 'u2')]),
    );
    assert.equal(textOf(next.message), 'Second.');
    assert.deepEqual(
      (await history(id)).map((m) => textOf(m)),
      ['hello once', 'Only once.', 'and again', 'Second.'],
    );
  });

  test('the write itself refuses a chat message posted already: two sent at once post it once', async () => {
    const id = await session();
    const store = h.service.app.store;
    const guard = { id: 'u-w', fp: 'fp-1', after: '0-0', keep: 2 };
    await store.apply(id, { posted: guard }, {});
    await assert.rejects(store.apply(id, { posted: { ...guard, fp: 'fp-2' } }, {}), (err: unknown) => {
      assert.ok(err instanceof AlreadyPosted, String(err));
      assert.deepEqual({ ...err.entry, rev: 0 }, { id: 'u-w', fp: 'fp-1', after: '0-0', rev: 0, idle: true });
      return true;
    });
    // The newest `keep` are kept.
    for (const n of ['u-x', 'u-y']) await store.apply(id, { posted: { ...guard, id: n } }, {});
    assert.deepEqual(
      (await store.load(id))!.chatPosted!.map((e) => e.id),
      ['u-y', 'u-x'],
    );
    // Two requests at once, through the route: one posts, the other streams the same run.
    h.fake.enqueue(text('Once, though sent twice.'));
    const both = await Promise.all(
      [1, 2].map(async () => readAll(await send(id, [userMessage('twice', 'u-t')]))),
    );
    for (const r of both) assert.equal(textOf(r.message), 'Once, though sent twice.');
    assert.deepEqual(
      (await history(id)).map((m) => textOf(m)),
      ['twice', 'Once, though sent twice.'],
    );
  });
});

describe('chat translator: a turn started again after a crash', () => {
  test('the partial turn is reset (reset-step, data-turn-dropped), the retried turn streams in the same step', async () => {
    const t = new ChatTranslator(undefined);
    const ev = (type: string, data: unknown) => t.event(type, data);
    const delta = (text: string) => ({
      iteration: 1,
      event: { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } },
    });
    const blockStart = {
      iteration: 1,
      event: { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    };
    const chunks: UIChunk[] = [
      ...t.start(),
      ...ev('session.status', { status: 'running' }),
      ...ev('turn.started', { iteration: 1 }),
      ...ev('stream.event', blockStart),
      ...ev('stream.event', delta('half an ans')),
      // The replica died here; another took the run over and sends the turn again.
      ...ev('turn.started', { iteration: 1 }),
      ...ev('stream.event', blockStart),
      ...ev('stream.event', delta('The whole answer.')),
      ...ev('stream.event', { iteration: 1, event: { type: 'content_block_stop', index: 0 } }),
      ...ev('turn.completed', {
        iteration: 1,
        message: { content: [{ type: 'text', text: 'The whole answer.' }] },
      }),
      ...ev('session.status', { status: 'idle', stop_reason: 'end_turn' }),
    ];
    assert.deepEqual(types(chunks as UIMessageChunk[]), [
      'start',
      'start-step',
      'text-start',
      'text-delta',
      'reset-step',
      'data-turn-dropped',
      'text-start',
      'text-delta',
      'text-end',
      'finish-step',
      'finish',
    ]);
    assert.equal(t.done, true);
    const stream = new ReadableStream<UIMessageChunk>({
      start(c) {
        for (const chunk of chunks) c.enqueue(chunk as UIMessageChunk);
        c.close();
      },
    });
    const { message } = await readAll(stream);
    assert.deepEqual(
      message?.parts.map((p) => (p.type === 'text' ? p.text : p.type)),
      ['step-start', 'The whole answer.'],
    );
  });
  test('a stream cut mid-turn (a replica shutting down): its open parts end, its step is reset, then the error', async () => {
    const t = new ChatTranslator(undefined);
    const chunks: UIChunk[] = [
      ...t.start(),
      ...t.event('turn.started', { iteration: 2 }),
      ...t.event('stream.event', {
        iteration: 2,
        event: { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } },
      }),
      ...t.event('stream.event', {
        iteration: 2,
        event: { type: 'content_block_start', index: 1, content_block: { type: 'text', text: 'Half' } },
      }),
      ...t.event('stream.event', {
        iteration: 2,
        event: {
          type: 'content_block_start',
          index: 2,
          content_block: { type: 'tool_use', id: 'toolu_cut', name: 'lookup_order', input: {} },
        },
      }),
      ...t.fail('The stream ended: shutting_down.'),
    ];
    assert.deepEqual(types(chunks as UIMessageChunk[]), [
      'start',
      'start-step',
      'reasoning-start',
      'text-start',
      'text-delta',
      'tool-input-start',
      'reasoning-end',
      'text-end',
      'tool-input-error',
      'reset-step',
      'data-turn-dropped',
      'error',
      'finish-step',
      'finish',
    ]);
    assert.deepEqual(chunks[10], {
      type: 'data-turn-dropped',
      data: { iteration: 2, reason: 'stream_ended' },
      transient: true,
    });
    const schema = uiMessageChunkSchema();
    for (const c of chunks) assert.ok((await schema.validate!(c)).success, JSON.stringify(c));
    let errors = 0;
    const stream = new ReadableStream<UIMessageChunk>({
      start(c) {
        for (const chunk of chunks) c.enqueue(chunk as UIMessageChunk);
        c.close();
      },
    });
    let last: UIMessage | undefined;
    for await (const m of readUIMessageStream({ stream, onError: () => void errors++ })) last = m;
    assert.equal(errors, 1, 'the error chunk only');
    assert.deepEqual(
      last?.parts.map((p) => p.type),
      ['step-start'],
    );
  });
});

describe('chat resume of a run longer than the event log keeps', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, EVENT_LOG_MAX: '100' } });
  });
  after(() => h?.close());

  test("GET /v1/chat/:id/stream replays what the log keeps (the run's start trimmed away), never 204 while it runs", async () => {
    const created = await h.api.post('/v1/sessions', { params, start: false });
    const id = created.body.id as string;
    const long = Array.from({ length: 400 }, (_, i) => `w${i}`).join(' ');
    // Held after 300 events: the log (100 entries) no longer holds the run's `session.status`.
    h.fake.enqueue(text(long, { eventDelayMs: 1, pauseAfterEvents: 300 }));
    const abort = new AbortController();
    const transport = chatTransport(h.service.url, KEY);
    await transport.sendMessages({
      chatId: id,
      messages: [userMessage('go')],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: abort.signal,
    });
    for (const deadline = Date.now() + 30_000; ;) {
      const page = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as Array<{
        type: string;
      }>;
      if (h.fake.held > 0 && page.length >= 100 && !page.some((e) => e.type === 'session.status')) break;
      assert.ok(Date.now() < deadline, 'the run streamed past what the log keeps');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    abort.abort();
    const resumed = await transport.reconnectToStream({ chatId: id });
    assert.ok(resumed, 'a run is active: not 204');
    h.fake.resume();
    const { chunks, message } = await readAll(resumed);
    assert.equal(chunks[0]?.type, 'start');
    assert.equal(chunks.at(-1)?.type, 'finish');
    assert.equal(textOf(message), long, 'the turn, shown whole from its message');
    await h.api.waitStatus(id, 'idle');
  });
});

describe('chat translator: a stream that starts while an earlier turn is at work', () => {
  test("a tool result of a turn before the stream's first is not part of its message", () => {
    const t = new ChatTranslator(undefined);
    const chunks: UIChunk[] = [
      ...t.start(),
      // The previous message's call completes after this stream's cursor: it is that message's.
      ...t.event('tool.completed', {
        tool_use_id: 'toolu_before',
        name: 'get_weather',
        input: {},
        content: 'sunny',
      }),
      ...t.event('turn.started', { iteration: 2 }),
      ...t.event('turn.completed', {
        iteration: 2,
        message: { content: [{ type: 'text', text: 'Both answered.' }], stop_reason: 'end_turn' },
      }),
      ...t.event('session.status', { status: 'idle', stop_reason: 'end_turn' }),
    ];
    assert.deepEqual(types(chunks as UIMessageChunk[]), [
      'start',
      'start-step',
      'text-start',
      'text-delta',
      'text-end',
      'finish-step',
      'finish',
    ]);
  });
});
