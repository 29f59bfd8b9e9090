/**
 * A call rewritten after its stream showed it: a result a review replaced (`PUT …/tool-results/:id`,
 * `tool_result.replaced`) and an approval with an edited input (`POST …/tool-calls/:id` with `input`). The model and
 * `GET /v1/chat/:id/messages` have the call as it ran; the UI message streams must leave the `Chat`'s part the same:
 * the replay of `GET /v1/chat/:id/stream`, read by the `ai` package's own `readUIMessageStream` (whose transport
 * checks every chunk against `uiMessageChunkSchema`), gives the tool part the page gives; and a stream that reads the
 * event live (the translator as a POST /v1/chat answer holds it) turns the part the client holds the same way.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readUIMessageStream, validateUIMessages, type UIMessage, type UIMessageChunk } from 'ai';
import { ChatTranslator, type UIChunk } from '../../src/chat/chunks.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { chatTransport, readAll } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-rewritten-key';
const params = { model: 'claude-test', max_tokens: 256 };
const CALL = 'toolu_rewritten';

type Part = Record<string, unknown>;
const partOf = (m: UIMessage | undefined, id = CALL): Part | undefined =>
  m?.parts.find((p) => 'toolCallId' in p && p.toolCallId === id) as Part | undefined;
/** What a tool part shows of its call: the fields the page and the stream must agree on. */
const shown = (p: Part | undefined) => ({
  state: p?.['state'],
  input: p?.['input'],
  output: p?.['output'],
  errorText: p?.['errorText'],
});

describe('chat streams of a call rewritten after it streamed', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  const transport = () => chatTransport(h.service.url, KEY);

  /** The page as a reloaded `Chat` gets it (validated by the `ai` package): its last message. */
  async function pageMessage(id: string): Promise<UIMessage> {
    const r = await h.api.get(`/v1/chat/${id}/messages`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return (await validateUIMessages<UIMessage>({ messages: r.body })).at(-1)!;
  }

  /**
   * A session whose first reply calls get_weather for Oslo, its second reply held (`gate`) until `release`: the run
   * is active while the test resumes its stream. The chat's first answer is read whole.
   */
  async function asked(policies: Record<string, unknown>) {
    const id = (
      await h.api.post('/v1/sessions', { params, start: false, tools: ['get_weather'], ...policies })
    ).body.id as string;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    h.fake.enqueue(toolCall('get_weather', { location: 'Oslo' }, { id: CALL }), {
      ...text('Here is the weather.'),
      gate,
    });
    const first = await readAll(
      await transport().sendMessages({
        chatId: id,
        messages: [{ id: 'u-1', role: 'user', parts: [{ type: 'text', text: 'weather' }] }],
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: undefined,
      }),
    );
    await h.api.waitStatus(id, 'requires_action');
    return { id, release, first: first.message };
  }

  /** The resumed stream of the run (held by its gate), read to its end once the gate opens. */
  async function replay(id: string, release: () => void): Promise<UIMessage> {
    const resumed = await transport().reconnectToStream({ chatId: id });
    assert.ok(resumed, 'the run is active');
    release();
    const { chunks, message } = await readAll(resumed);
    assert.equal(chunks.at(-1)?.type, 'finish');
    assert.ok(message);
    await h.api.waitStatus(id, 'idle');
    // As a Chat would keep it: the ai package's schema of a message.
    return (await validateUIMessages<UIMessage>({ messages: [message] }))[0]!;
  }

  for (const [name, body, want] of [
    [
      'a result replaced under review: the replay shows the replacement, as the page does',
      { content: 'REPLACED BY REVIEWER' },
      { state: 'output-available', output: 'REPLACED BY REVIEWER', errorText: undefined },
    ],
    [
      'a result replaced by an error under review: the replay shows output-error, as the page does',
      { content: 'The reviewer refused this result.', is_error: true },
      { state: 'output-error', output: undefined, errorText: 'The reviewer refused this result.' },
    ],
  ] as const) {
    it(name, async () => {
      const { id, release, first } = await asked({ review_tool_results: true });
      const live = partOf(first);
      assert.equal(live?.['state'], 'output-available');
      assert.match(String(live?.['output']), /Oslo/, 'the first answer showed the tool output');
      const put = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/${CALL}`, body);
      assert.equal(put.status, 200, JSON.stringify(put.body));
      const c = await h.api.post(`/v1/sessions/${id}/continue`, {});
      assert.equal(c.status, 202, JSON.stringify(c.body));
      const replayed = partOf(await replay(id, release));
      const page = partOf(await pageMessage(id));
      assert.deepEqual(shown(page), { input: { location: 'Oslo' }, ...want });
      assert.deepEqual(shown(replayed), shown(page));
    });
  }

  it('an approval with an edited input: the replay shows the input that ran, as the page does', async () => {
    const { id, release, first } = await asked({ approval: 'always' });
    assert.equal(partOf(first)?.['state'], 'approval-requested');
    const d = await h.api.post(`/v1/sessions/${id}/tool-calls/${CALL}`, {
      decision: 'approve',
      input: { location: 'Rome' },
    });
    assert.equal(d.status, 202, JSON.stringify(d.body));
    const replayed = partOf(await replay(id, release));
    const page = partOf(await pageMessage(id));
    assert.equal(page?.['state'], 'output-available');
    assert.deepEqual(page?.['input'], { location: 'Rome' });
    assert.match(String(page?.['output']), /Rome/);
    assert.deepEqual(shown(replayed), shown(page));
    assert.deepEqual(replayed?.['approval'], { id: CALL, approved: true });
  });

  it("an input edited by REST before the chat's answer: the answer shows the input that ran, as the page does", async () => {
    const id = (
      await h.api.post('/v1/sessions', { params, start: false, tools: ['get_weather'], approval: 'always' })
    ).body.id as string;
    h.fake.enqueue(
      toolCalls([
        toolUse('get_weather', { location: 'Oslo' }, CALL),
        toolUse('get_weather', { location: 'Paris' }, 'toolu_other'),
      ]),
      text('Both done.'),
    );
    const user: UIMessage = { id: 'u-2', role: 'user', parts: [{ type: 'text', text: 'weather twice' }] };
    const send = (messages: UIMessage[]) =>
      transport().sendMessages({
        chatId: id,
        messages,
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: undefined,
      });
    const first = (await readAll(await send([user]))).message!;
    assert.equal(partOf(first)?.['state'], 'approval-requested');
    // Another client approves the first call with an edit; this chat's user approves the other one.
    const d = await h.api.post(`/v1/sessions/${id}/tool-calls/${CALL}`, {
      decision: 'approve',
      input: { location: 'Rome' },
    });
    assert.equal(d.status, 200, JSON.stringify(d.body));
    const answered: UIMessage = {
      ...first,
      parts: first.parts.map((p) =>
        'toolCallId' in p && p.toolCallId === 'toolu_other'
          ? ({
              ...p,
              state: 'approval-responded',
              approval: { id: 'toolu_other', approved: true },
            } as typeof p)
          : p,
      ),
    };
    const { message } = await readAll(await send([user, answered]), answered);
    await h.api.waitStatus(id, 'idle');
    const page = partOf(await pageMessage(id));
    assert.deepEqual(page?.['input'], { location: 'Rome' });
    assert.deepEqual(shown(partOf(message)), shown(page));
  });
});

/** The message `readUIMessageStream` builds of `chunks` over `message` (the client's), validated by the package. */
async function messageOf(chunks: UIChunk[], message?: UIMessage): Promise<UIMessage> {
  const stream = new ReadableStream<UIMessageChunk>({
    start(c) {
      for (const chunk of chunks) c.enqueue(chunk as UIMessageChunk);
      c.close();
    },
  });
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream, ...(message ? { message } : {}) })) last = m;
  assert.ok(last);
  return (await validateUIMessages<UIMessage>({ messages: [last] }))[0]!;
}

describe('a stream that reads the rewrite live', () => {
  const call = { id: CALL, name: 'get_weather', input: { location: 'Oslo' } };
  const ran = (content: string) => ({ tool_use_id: CALL, ...call, content, is_error: false });

  /** A stream of a running message: the call's turn, its output, then the events of `then`. */
  function streamed(then: (t: ChatTranslator) => UIChunk[]): UIChunk[] {
    const t = new ChatTranslator('ses_x-1');
    return [
      ...t.start(),
      ...t.event('turn.started', { iteration: 1 }, '1-0'),
      ...t.event('turn.completed', {
        iteration: 1,
        message: { content: [{ type: 'tool_use', ...call }], stop_reason: 'tool_use' },
      }),
      ...t.event('tool.completed', ran('Sunny in Oslo')),
      ...then(t),
      ...t.event('session.status', { status: 'idle', stop_reason: 'end_turn' }),
    ];
  }

  it('a replacement turns the output, and an error replacement the state, each time', async () => {
    const chunks = streamed((t) => [
      ...t.event('tool_result.replaced', { tool_use_id: CALL, content: 'Not sure.', is_error: true }),
    ]);
    assert.deepEqual(shown(partOf(await messageOf(chunks))), {
      state: 'output-error',
      input: call.input,
      output: undefined,
      errorText: 'Not sure.',
    });
    const back = streamed((t) => [
      ...t.event('tool_result.replaced', { tool_use_id: CALL, content: 'Not sure.', is_error: true }),
      ...t.event('tool_result.replaced', {
        tool_use_id: CALL,
        content: [{ type: 'text', text: 'Rain.' }],
        is_error: false,
      }),
    ]);
    assert.deepEqual(shown(partOf(await messageOf(back))), {
      state: 'output-available',
      input: call.input,
      output: [{ type: 'text', text: 'Rain.' }],
      errorText: undefined,
    });
  });

  it("a replacement of a call the client's message holds (its own output): the replacement is shown", async () => {
    const held: UIMessage = {
      id: 'ses_x-1',
      role: 'assistant',
      parts: [
        { type: 'step-start' },
        {
          type: 'tool-lookup',
          toolCallId: CALL,
          state: 'output-available',
          input: {},
          output: { found: true },
        },
      ],
    };
    const t = new ChatTranslator('ses_x-1', [CALL], { answered: [CALL] });
    const chunks = [
      ...t.start(),
      ...t.event('tool_result.replaced', { tool_use_id: CALL, content: 'Reviewed.', is_error: false }),
      { type: 'finish' },
    ];
    assert.equal(partOf(await messageOf(chunks, held))?.['output'], 'Reviewed.');
  });

  /** A stream's chunks up to the approval it asks for the call. */
  const askedApproval = (t: ChatTranslator) => [
    ...t.start(),
    ...t.event('turn.started', { iteration: 1 }, '1-0'),
    ...t.event(
      'turn.completed',
      { iteration: 1, message: { content: [{ type: 'tool_use', ...call }], stop_reason: 'tool_use' } },
      '1-1',
    ),
    ...t.event(
      'session.status',
      { status: 'requires_action', required_action: { type: 'approve_tool_calls', tool_calls: [call] } },
      '1-2',
    ),
  ];

  it('an approval with an edited input answers the approval this stream asked, with the new input', async () => {
    const t = new ChatTranslator('ses_x-1', [], { pausedBefore: '5-0' });
    const chunks = [
      ...askedApproval(t),
      ...t.event(
        'tool_call.decided',
        { tool_use_id: CALL, decision: 'approve', input: { location: 'Rome' } },
        '2-0',
      ),
    ];
    const waiting = partOf(await messageOf([...chunks, { type: 'finish' }]));
    assert.equal(waiting?.['state'], 'approval-responded');
    assert.deepEqual(waiting?.['input'], { location: 'Rome' });
    const done = [
      ...chunks,
      ...t.event('tool.completed', { ...ran('Sunny in Rome'), input: { location: 'Rome' } }, '6-0'),
      ...t.event('session.status', { status: 'idle', stop_reason: 'end_turn' }, '7-0'),
    ];
    const part = partOf(await messageOf(done));
    assert.deepEqual(shown(part), {
      state: 'output-available',
      input: { location: 'Rome' },
      output: 'Sunny in Rome',
      errorText: undefined,
    });
    assert.deepEqual(part?.['approval'], { id: CALL, approved: true });
  });

  it('a denied call whose result a review replaced stays denied (its approval says so)', async () => {
    const t = new ChatTranslator('ses_x-1', [], { pausedBefore: '5-0' });
    const chunks = [
      ...askedApproval(t),
      ...t.event('tool_call.decided', { tool_use_id: CALL, decision: 'deny' }, '2-0'),
      ...t.event('tool_result.replaced', { tool_use_id: CALL, content: 'Ran after all.' }, '3-0'),
      { type: 'finish' },
    ];
    assert.equal(partOf(await messageOf(chunks))?.['state'], 'output-denied');
  });
});
