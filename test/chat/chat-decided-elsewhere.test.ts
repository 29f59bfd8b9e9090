/**
 * A decision made outside the chat for a call whose approval the Chat shows asked (`approval-requested`): approved,
 * denied or edited over REST (`POST …/tool-calls/:id`), or denied by the action's timeout, before the chat's next
 * answer (POST /v1/chat for another call of the step, which did not ask this one) completes the call. The `ai`
 * package's schema wants `approved` in the approval of a part past `approval-requested` (true beside an output, false
 * with `output-denied`): the answer's message, a resumed stream (GET /v1/chat/:id/stream) and the page (GET
 * /v1/chat/:id/messages) each end valid for `validateUIMessages`, and say what the session did. A result submitted
 * elsewhere for a client call the Chat shows waiting ends valid too.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readUIMessageStream, validateUIMessages, type UIMessage, type UIMessageChunk } from 'ai';
import { reply, text, toolUse } from '../fake/script.js';
import type { FakeMessageReply } from '../../src/offline/wire.js';
import { ChatTranslator, type UIChunk } from '../../src/chat/chunks.js';
import type { DecidedCall } from '../../src/store/idempotency.js';
import { weatherAndOrderCalls, weatherAndOrderTools } from '../fixtures/chat-tools.js';
import { PlainChat, chatTransport, readAll, sseDataLines } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-decided-elsewhere-key';

type Part = Record<string, unknown>;

/** `m` validated as a reloaded Chat's messages are (throws as the `ai` package does). */
async function valid(m: UIMessage | undefined): Promise<UIMessage> {
  assert.ok(m);
  const [checked] = await validateUIMessages<UIMessage>({ messages: [m] });
  return checked!;
}

const partOf = (m: UIMessage, toolCallId: string): Part => {
  const p = m.parts.find((x) => 'toolCallId' in x && x.toolCallId === toolCallId);
  assert.ok(p, `no part of ${toolCallId}`);
  return p as Part;
};

/** The `approved` of a part's approval (the Chat's own answer holds `reason: undefined` beside it). */
const approvedOf = (p: Part) => (p['approval'] as { approved?: unknown } | undefined)?.approved;

/** What a part says of its call, as a UI shows it. */
const shown = (p: Part) => ({ state: p['state'], input: p['input'], approval: p['approval'] });

describe('chat: calls decided elsewhere', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({
      env: { API_KEYS: `acme:${KEY}`, ACTION_TIMEOUT_MIN_S: '1', DEADLINE_SWEEP_MS: '50' },
    });
  });
  after(() => h?.close());

  const transport = () => chatTransport(h.service.url, KEY);

  /** The page as a reloaded Chat gets it, validated, and its last message. */
  async function page(id: string): Promise<UIMessage> {
    const r = await h.api.get(`/v1/chat/${id}/messages`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return (await validateUIMessages<UIMessage>({ messages: r.body })).at(-1)!;
  }

  /**
   * The chat's answer `send` (it answers the other call of the step) streamed while the run's last turn is held: a
   * resumed stream (GET /v1/chat/:id/stream) is read meanwhile, then the turn goes on. Both messages are validated.
   */
  async function answerAndResume(id: string, release: () => void, send: () => Promise<void>) {
    const base = h.fake.requests.length;
    const answering = send();
    await h.fake.waitForRequests(base + 1);
    const resumed = await transport().reconnectToStream({ chatId: id });
    assert.ok(resumed, 'the run is active: its stream resumes');
    const reading = readAll(resumed);
    release();
    await answering;
    const { message } = await reading;
    await h.api.waitStatus(id, 'idle');
    return valid(message);
  }

  /**
   * A session created with `body` (and `start: false`) whose reply is `calls`, asked `question` through a Chat; the
   * turn after (`Done.`) is held until `release`. `asked` is the Chat's message of the calls.
   */
  async function chatted(body: Record<string, unknown>, calls: FakeMessageReply, question: string) {
    const id = (await h.api.post('/v1/sessions', { start: false, ...body })).body.id as string;
    let release!: () => void;
    h.fake.enqueue(calls, { ...text('Done.'), gate: new Promise<void>((r) => (release = r)) });
    const chat = new PlainChat({ id, transport: transport() });
    await chat.sendMessage({ text: question });
    return { id, chat, release, asked: chat.messages.at(-1)! };
  }

  /** A session whose reply calls get_weather twice (`a`, `b`), both asked for approval through a Chat. */
  async function askedTwice(a: string, b: string) {
    const { asked, ...session } = await chatted(
      { tools: ['get_weather'], approval: 'always' },
      reply([
        toolUse('get_weather', { location: 'Paris' }, a),
        toolUse('get_weather', { location: 'Rome' }, b),
      ]),
      'Weather in Paris and Rome?',
    );
    assert.equal(partOf(asked, a)['state'], 'approval-requested');
    assert.equal(partOf(asked, b)['state'], 'approval-requested');
    return session;
  }

  /**
   * A session whose reply calls get_weather (`w`, asked for approval) and the client's lookup_order (`c`), sent
   * through a Chat; `more` adds to its create body.
   */
  const weatherAndOrder = (w: string, c: string, more: Record<string, unknown> = {}) =>
    chatted({ ...weatherAndOrderTools, ...more }, weatherAndOrderCalls(w, c), 'Weather and my order?');

  const cases = [
    {
      what: 'approved',
      body: { decision: 'approve' },
      live: { state: 'output-available', input: { location: 'Paris' }, approved: true },
    },
    {
      what: 'denied',
      body: { decision: 'deny', reason: 'not Paris' },
      live: { state: 'output-denied', input: { location: 'Paris' }, approved: false, reason: 'not Paris' },
    },
    {
      what: 'edited',
      body: { decision: 'approve', input: { location: 'Milan' } },
      live: { state: 'output-available', input: { location: 'Milan' }, approved: true },
    },
  ] as const;

  for (const c of cases)
    it(`${c.what} over REST, then the chat answers the other call: every view ends valid, as the session did`, async () => {
      const a = `toolu_${c.what}_a`;
      const b = `toolu_${c.what}_b`;
      const { id, chat, release } = await askedTwice(a, b);
      const decided = await h.api.post(`/v1/sessions/${id}/tool-calls/${a}`, c.body);
      assert.equal(decided.status, 200, JSON.stringify(decided.body));

      const resumed = await answerAndResume(id, release, async () => {
        await chat.addToolApprovalResponse({ id: b, approved: true });
        // Not sent by itself (sendAutomaticallyWhen waits for every approval the message shows asked): sent.
        await chat.sendMessage();
      });
      assert.equal(chat.error, undefined);
      const live = await valid(chat.messages.at(-1));
      const { state, input, approved, ...reason } = c.live;
      const expected = { state, input, approval: { id: a, approved, ...reason } };
      assert.deepEqual(shown(partOf(live, a)), expected);
      assert.equal(approvedOf(partOf(live, b)), true);
      if (c.what === 'edited') assert.match(String(partOf(live, a)['output']), /Milan/);
      // The resumed stream replays the message from its start: the approval asked, the REST decision, the output.
      assert.deepEqual(shown(partOf(resumed, a)), expected);
      assert.deepEqual(partOf(resumed, a)['output'], partOf(live, a)['output']);
      // The page: an approved call shows its output (no approval kept), a denied one its denial.
      const reloaded = partOf(await page(id), a);
      assert.equal(reloaded['state'], state);
      assert.deepEqual(reloaded['input'], input);
      if (!approved) assert.deepEqual(reloaded['approval'], expected.approval);
      else assert.deepEqual(reloaded['output'], partOf(live, a)['output']);
    });

  it("an Idempotency-Key replay of the chat's answer shows the REST denial again (as denied, not approved)", async () => {
    const { id, chat, release } = await askedTwice('toolu_r_a', 'toolu_r_b');
    release();
    const denied = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_r_a`, {
      decision: 'deny',
      reason: 'no',
    });
    assert.equal(denied.status, 200, JSON.stringify(denied.body));
    const [user, asked] = chat.messages as [UIMessage, UIMessage];
    const answered: UIMessage = {
      ...asked,
      parts: asked.parts.map((p) =>
        'toolCallId' in p && p.toolCallId === 'toolu_r_b'
          ? ({ ...p, state: 'approval-responded', approval: { id: 'toolu_r_b', approved: true } } as never)
          : p,
      ),
    };
    const post = () =>
      fetch(`${h.service.url}/v1/chat`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${KEY}`,
          'content-type': 'application/json',
          'idempotency-key': 'denied-elsewhere',
        },
        body: JSON.stringify({
          id,
          messages: [user, answered],
          trigger: 'submit-message',
          messageId: asked.id,
        }),
      });
    const messageOf = async (res: Response) => {
      assert.equal(res.status, 200);
      const chunks = sseDataLines(await res.text())
        .filter((l) => l !== '[DONE]')
        .map((l) => JSON.parse(l) as UIMessageChunk);
      const stream = new ReadableStream<UIMessageChunk>({
        start(ctl) {
          for (const ch of chunks) ctl.enqueue(ch);
          ctl.close();
        },
      });
      let last: UIMessage | undefined;
      for await (const m of readUIMessageStream({ stream, message: structuredClone(answered) })) last = m;
      return valid(last);
    };
    const first = await messageOf(await post());
    await h.api.waitStatus(id, 'idle');
    const again = await post();
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    const replayed = await messageOf(again);
    for (const m of [first, replayed])
      assert.deepEqual(shown(partOf(m, 'toolu_r_a')), {
        state: 'output-denied',
        input: { location: 'Paris' },
        approval: { id: 'toolu_r_a', approved: false, reason: 'no' },
      });
  });

  it("denied by the action's timeout, then the chat gives the client call's output: the denial shows as one", async () => {
    const { id, chat, release, asked } = await weatherAndOrder('toolu_t_w', 'toolu_t_c', {
      action_timeout_s: 2,
    });
    assert.equal(partOf(asked, 'toolu_t_w')['state'], 'approval-requested');
    // The approval keeps its deadline; the client result asked after it gets none (the policy from now on).
    const patched = await h.api.req('PATCH', `/v1/sessions/${id}`, { action_timeout_s: null });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const waiting = await h.api.waitFor(
      id,
      (s) => s.status === 'requires_action' && s.required_action.type === 'submit_tool_results',
    );
    assert.deepEqual(
      waiting.required_action.tool_calls.map((x: { id: string }) => x.id),
      ['toolu_t_c'],
    );

    const resumed = await answerAndResume(id, release, async () => {
      await chat.addToolOutput({ tool: 'lookup_order', toolCallId: 'toolu_t_c', output: 'shipped' } as never);
      await chat.sendMessage();
    });
    assert.equal(chat.error, undefined);
    const expected = {
      state: 'output-denied',
      input: { location: 'Paris' },
      approval: { id: 'toolu_t_w', approved: false, reason: 'timed out' },
    };
    const live = await valid(chat.messages.at(-1));
    assert.deepEqual(shown(partOf(live, 'toolu_t_w')), expected);
    assert.equal(partOf(live, 'toolu_t_c')['output'], 'shipped');
    assert.deepEqual(shown(partOf(resumed, 'toolu_t_w')), expected);
    assert.deepEqual(shown(partOf(await page(id), 'toolu_t_w')), expected);
  });

  it('approved over REST, it runs while the step waits for the client: the answer to its output shows both', async () => {
    const { id, chat, release, asked } = await weatherAndOrder('toolu_ran_w', 'toolu_ran_c');
    assert.equal(partOf(asked, 'toolu_ran_w')['state'], 'approval-requested');
    const approved = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_ran_w`, { decision: 'approve' });
    assert.equal(approved.status, 202, JSON.stringify(approved.body));
    // The approved call runs; the step then waits for the client's output (its tool.completed is in the log now).
    await h.api.waitFor(
      id,
      (s) => s.status === 'requires_action' && s.required_action.type === 'submit_tool_results',
    );

    const resumed = await answerAndResume(id, release, async () => {
      await chat.addToolOutput({
        tool: 'lookup_order',
        toolCallId: 'toolu_ran_c',
        output: 'shipped',
      } as never);
      await chat.sendMessage();
    });
    assert.equal(chat.error, undefined);
    const live = await valid(chat.messages.at(-1));
    const reloaded = await page(id);
    for (const m of [live, resumed, reloaded]) {
      const p = partOf(m, 'toolu_ran_w');
      assert.equal(p['state'], 'output-available', JSON.stringify(p));
      assert.match(String(p['output']), /Paris/);
    }
    assert.deepEqual(partOf(live, 'toolu_ran_w')['approval'], { id: 'toolu_ran_w', approved: true });
  });

  it('a result submitted over REST for a client call the Chat shows waiting, then an approval by the chat', async () => {
    const { id, chat, release, asked } = await weatherAndOrder('toolu_s_w', 'toolu_s_c');
    assert.equal(partOf(asked, 'toolu_s_c')['state'], 'input-available');
    const sent = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_s_c`, {
      content: 'from REST',
    });
    assert.ok(sent.status < 300, JSON.stringify(sent.body));

    const resumed = await answerAndResume(id, release, async () => {
      await chat.addToolApprovalResponse({ id: 'toolu_s_w', approved: true });
      await chat.sendMessage();
    });
    assert.equal(chat.error, undefined);
    const live = await valid(chat.messages.at(-1));
    for (const m of [live, resumed, await page(id)]) {
      const p = partOf(m, 'toolu_s_c');
      assert.equal(p['state'], 'output-available');
      assert.equal(p['output'], 'from REST');
    }
    assert.equal(approvedOf(partOf(live, 'toolu_s_w')), true);
  });
});

describe('chat translator: approvals the client message shows asked', () => {
  const call = { id: 'toolu_w', name: 'get_weather', input: { location: 'Paris' } };
  /** The Chat's message: the call's approval asked, not answered. */
  const asked: UIMessage = {
    id: 'ses_x-1',
    role: 'assistant',
    parts: [
      { type: 'step-start' },
      {
        type: 'tool-get_weather',
        toolCallId: call.id,
        state: 'approval-requested',
        input: call.input,
        approval: { id: call.id },
      },
    ],
  };
  const translator = (decided: DecidedCall[] = []) =>
    new ChatTranslator('ses_x-1', [call.id], {
      asking: [call.id],
      inputs: [[call.id, call.input]],
      repliedBefore: true,
      decided,
    });
  const completed = (content: string, isError = false) => ({
    tool_use_id: call.id,
    name: call.name,
    input: call.input,
    content,
    is_error: isError,
  });

  /** The Chat's message after `chunks`, validated. */
  async function after(chunks: UIChunk[]): Promise<Part> {
    const stream = new ReadableStream<UIMessageChunk>({
      start(ctl) {
        for (const ch of chunks) ctl.enqueue(ch as UIMessageChunk);
        ctl.close();
      },
    });
    let last: UIMessage | undefined;
    for await (const m of readUIMessageStream({ stream, message: structuredClone(asked) })) last = m;
    return partOf(await valid(last), call.id);
  }
  const responses = (chunks: UIChunk[]) => chunks.filter((c) => c.type === 'tool-approval-response');

  it('a decision the stream reads (made after its cursor) answers the approval it did not ask', async () => {
    const t = translator();
    const chunks = [
      ...t.start(),
      ...t.decidedFirst(),
      ...t.event('tool_call.decided', { tool_use_id: call.id, decision: 'approve' }, '2-0'),
      ...t.event('tool.completed', completed('Sunny'), '3-0'),
    ];
    assert.equal(responses(chunks).length, 1);
    const part = await after([...chunks, { type: 'finish' }]);
    assert.equal(part['state'], 'output-available');
    assert.deepEqual(part['approval'], { id: call.id, approved: true });
  });

  it('a denial answered first and read again (made as the request read its cursor): one answer, denied', async () => {
    const t = translator([{ tool_use_id: call.id, name: call.name, approved: false, reason: 'no' }]);
    const chunks = [
      ...t.start(),
      ...t.decidedFirst(),
      ...t.event('tool_call.decided', { tool_use_id: call.id, decision: 'deny', reason: 'no' }, '2-0'),
      ...t.event('tool.completed', completed('Tool call denied: no', true), '3-0'),
    ];
    assert.equal(responses(chunks).length, 1);
    assert.ok(!chunks.some((c) => c.type === 'tool-output-error'), JSON.stringify(chunks));
    const part = await after([...chunks, { type: 'finish' }]);
    assert.equal(part['state'], 'output-denied');
    assert.deepEqual(part['approval'], { id: call.id, approved: false, reason: 'no' });
  });

  it('an edited approval answered first: the input that ran, then the approval, then its output', async () => {
    const edited = { location: 'Milan' };
    const t = translator([{ tool_use_id: call.id, name: call.name, approved: true, input: edited }]);
    const chunks = [
      ...t.start(),
      ...t.decidedFirst(),
      ...t.event('tool.completed', { ...completed('Snow'), input: edited }, '3-0'),
    ];
    assert.deepEqual(
      chunks.map((c) => c.type),
      ['start', 'tool-input-available', 'tool-approval-response', 'tool-output-available'],
    );
    const part = await after([...chunks, { type: 'finish' }]);
    assert.deepEqual(shown(part), {
      state: 'output-available',
      input: edited,
      approval: { id: call.id, approved: true },
    });
  });

  it('an output with no decision known (a replay whose record kept none): the call ran, so it was approved', async () => {
    const t = translator();
    const chunks = [
      ...t.start(),
      ...t.decidedFirst(),
      ...t.event('tool.completed', completed('Sunny'), '3-0'),
    ];
    const part = await after([...chunks, { type: 'finish' }]);
    assert.equal(part['state'], 'output-available');
    assert.deepEqual(part['approval'], { id: call.id, approved: true });
  });
});
