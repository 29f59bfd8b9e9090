/**
 * A follow-up sent while a chat's run streams (spec §7.3): it joins the run at the next step (its tool results), and
 * the history shows it as a user message of its own, the answer after it a new assistant message (docs/API.md "a
 * follow-up that joined a step's tool results starts a message of its own"). The stream that was answering the first
 * message ends where the follow-up joins; the follow-up's own stream carries the answer: the `Chat` shows it once,
 * where the history does.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DefaultChatTransport, validateUIMessages, type UIMessage, type UIMessageChunk } from 'ai';
import { ChatTranslator, type UIChunk } from '../../src/chat/chunks.js';
import { reply, text, textBlock, toolUse } from '../fake/script.js';
import { PlainChat, chatTransport, readAll, sseDataLines, submitRaw } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-followup-key';
const LONG = Array.from({ length: 12 }, (_, i) => `word${i}`).join(' ');

const textOf = (m: UIMessage | undefined) =>
  (m?.parts ?? []).flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');
const user = (t: string): UIMessage => ({
  id: `u-${Math.random().toString(36).slice(2)}`,
  role: 'user',
  parts: [{ type: 'text', text: t }],
});

describe('chat: a follow-up sent while the run streams', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  /** A session whose first reply (a get_weather call) is held by the fake until `h.fake.resume()`. */
  async function session() {
    const id = (await h.api.post('/v1/sessions', { start: false, tools: ['get_weather'] })).body.id as string;
    h.fake.enqueue(
      reply([textBlock('Checking.'), toolUse('get_weather', { location: 'Paris' })], { pauseAfterEvents: 2 }),
      text(LONG, { eventDelayMs: 5 }),
    );
    return id;
  }

  /**
   * A transport whose `answered` resolves once the service has answered a post whose body holds `marker` (its
   * response's headers: the post is done, the follow-up queued).
   */
  function watchedTransport(marker: string) {
    let answered!: () => void;
    const done = new Promise<void>((resolve) => (answered = resolve));
    const transport = new DefaultChatTransport({
      api: `${h.service.url}/v1/chat`,
      headers: { authorization: `Bearer ${KEY}` },
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        if (typeof init?.body === 'string' && init.body.includes(marker)) answered();
        return res;
      },
    });
    return { transport, answered: done };
  }

  it('with Chat: the answer to the follow-up shows once, after it, as the history has it', async () => {
    const id = await session();
    const base = h.fake.requests.length;
    const { transport, answered } = watchedTransport('follow-up');
    const chat = new PlainChat({ id, transport });
    const first = chat.sendMessage({ text: 'first' });
    await h.fake.waitForRequests(base + 1);
    const second = chat.sendMessage({ text: 'follow-up' });
    await answered;
    h.fake.resume();
    await Promise.all([first, second]);
    await h.api.waitStatus(id, 'idle');
    assert.equal(chat.error, undefined);
    const history = await validateUIMessages<UIMessage>({
      messages: (await h.api.get(`/v1/chat/${id}/messages`)).body,
    });
    assert.deepEqual(
      history.map((m) => [m.role, textOf(m)]),
      [
        ['user', 'first'],
        ['assistant', 'Checking.'],
        ['user', 'follow-up'],
        ['assistant', LONG],
      ],
    );
    const shown = chat.messages.map(textOf).filter((t) => t === LONG);
    assert.equal(shown.length, 1, `the answer shows once: ${JSON.stringify(chat.messages.map(textOf))}`);
    assert.deepEqual(
      chat.messages.map((m) => [m.role, textOf(m)]),
      history.map((m) => [m.role, textOf(m)]),
    );
  });

  it('two raw posts: the first stream ends where the follow-up joins, the second carries the answer', async () => {
    const id = await session();
    const base = h.fake.requests.length;
    const send = (messages: UIMessage[]) => submitRaw(h.service.url, KEY, id, messages);
    const firstMsg = user('first');
    const first = readAll(await send([firstMsg]));
    await h.fake.waitForRequests(base + 1);
    // Its answer's headers come once the follow-up is queued.
    const second = readAll(await send([firstMsg, user('follow-up')]));
    h.fake.resume();
    const [a, b] = await Promise.all([first, second]);
    const kinds = (cs: UIMessageChunk[]) => cs.map((c) => c.type).filter((t, i, all) => t !== all[i - 1]);
    // The first answer: its step (the call, its output), then its end as the follow-up joins.
    assert.deepEqual(kinds(a.chunks).slice(-3), ['tool-output-available', 'finish-step', 'finish']);
    assert.deepEqual(a.chunks.at(-1), { type: 'finish', finishReason: 'other' });
    assert.equal(textOf(a.message), 'Checking.');
    assert.equal(textOf(b.message), LONG);
    // Each names the message the history gives it.
    await h.api.waitStatus(id, 'idle');
    const history = (await h.api.get(`/v1/chat/${id}/messages`)).body as UIMessage[];
    assert.equal(a.message?.id, history[1]?.id);
    assert.equal(textOf(history[3]), LONG);
  });

  it('a follow-up from elsewhere: the first answer ends where it joins; a reload replays its answer alone', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false, tools: ['get_weather'] })).body.id as string;
    h.fake.enqueue(
      reply([textBlock('Checking.'), toolUse('get_weather', { location: 'Paris' })], { pauseAfterEvents: 2 }),
      text(LONG, { pauseAfterEvents: 3 }),
    );
    const base = h.fake.requests.length;
    const transport = chatTransport(h.service.url, KEY);
    const firstMsg = user('first');
    const first = readAll(await submitRaw(h.service.url, KEY, id, [firstMsg]));
    await h.fake.waitForRequests(base + 1);
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { content: 'follow-up' })).status, 202);
    h.fake.resume();
    await h.fake.waitForRequests(base + 2);
    const resumed = await transport.reconnectToStream({ chatId: id });
    assert.ok(resumed);
    const replay = readAll(resumed);
    h.fake.resume();
    const [r, a] = await Promise.all([replay, first]);
    await h.api.waitStatus(id, 'idle');
    // The first answer ended where the follow-up (posted by another client) joined.
    assert.equal(textOf(a.message), 'Checking.');
    const history = (await h.api.get(`/v1/chat/${id}/messages`)).body as UIMessage[];
    assert.equal(r.message?.id, history.at(-1)?.id);
    assert.equal(textOf(r.message), LONG);
  });

  it("another client's message queued after the post's cursor joins alone first: the post streams its own answer", async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    let answerFirst!: () => void;
    let answerRest!: () => void;
    h.fake.enqueue(
      { ...text('First answer.'), gate: new Promise<void>((r) => (answerFirst = r)) },
      { ...text('Answer to REST.'), gate: new Promise<void>((r) => (answerRest = r)) },
      text('Answer to own.'),
    );
    const base = h.fake.requests.length;
    const firstMsg = user('first');
    const ownMsg = user('own');
    const first = readAll(await sendRaw(h, id, [firstMsg]));
    await h.fake.waitForRequests(base + 1);
    const post = (key?: string) =>
      fetch(`${h.service.url}/v1/chat`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${KEY}`,
          'content-type': 'application/json',
          ...(key ? { 'idempotency-key': key } : {}),
        },
        body: JSON.stringify({ id, trigger: 'submit-message', messages: [firstMsg, ownMsg] }),
      });
    const answerOf = async (res: Response) => {
      assert.equal(res.status, 200);
      const chunks = sseDataLines(await res.text())
        .filter((l) => l !== '[DONE]')
        .map((l) => JSON.parse(l) as UIChunk);
      const said = chunks.flatMap((c) => (c.type === 'text-delta' ? [c['delta']] : [])).join('');
      return { said, end: chunks.at(-1) };
    };
    // Between the post's read of its cursor and its write, a REST message is queued, joins the run alone at the
    // first reply's end, and its answer's request is made.
    const log = (h.service.app as any).eventsHub.eventLog;
    const lastId = log.lastId;
    let raced = false;
    log.lastId = async function (this: unknown, sid: string, ...rest: unknown[]) {
      const cursor = await lastId.call(this, sid, ...rest);
      if (sid === id && !raced) {
        raced = true;
        const r = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'from REST' });
        assert.equal(r.status, 202, JSON.stringify(r.body));
        answerFirst();
        await h.fake.waitForRequests(base + 2);
      }
      return cursor;
    };
    let own: Response;
    try {
      own = await post('own-once');
    } finally {
      log.lastId = lastId;
    }
    assert.ok(raced);
    // The own message is queued (the post answered): the REST message's answer ends, and the own one joins.
    answerRest();
    const [a, b] = await Promise.all([first, answerOf(own)]);
    await h.api.waitStatus(id, 'idle');
    const history = (await h.api.get(`/v1/chat/${id}/messages`)).body as UIMessage[];
    assert.deepEqual(
      history.map((m) => [m.role, textOf(m)]),
      [
        ['user', 'first'],
        ['assistant', 'First answer.'],
        ['user', 'from REST'],
        ['assistant', 'Answer to REST.'],
        ['user', 'own'],
        ['assistant', 'Answer to own.'],
      ],
    );
    assert.equal(textOf(a.message), 'First answer.');
    // Taking the first queued event for its own, the post streamed the REST message's answer and ended ('other')
    // where its own joined: its own answer streamed nowhere.
    assert.deepEqual(b, { said: 'Answer to own.', end: { type: 'finish', finishReason: 'stop' } });
    // The same request again (Idempotency-Key), and the same message sent again without it (its answer lost): each
    // streams from the first answer's cursor, and finds its own message the same way.
    const replayed = await post('own-once');
    assert.equal(replayed.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await answerOf(replayed), b);
    assert.deepEqual(await answerOf(await post()), b);
    const users = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data.filter(
      (m: { role: string }) => m.role === 'user',
    );
    assert.equal(users.length, 3, 'nothing was posted twice');
  });
});

/** A raw `POST /v1/chat` of `messages` (the transport `useChat` uses), its stream returned. */
const sendRaw = (h: Harness, id: string, messages: UIMessage[]) =>
  submitRaw(h.service.url, KEY, id, messages);

describe('chat: a follow-up queued before a turn of the earlier answer starts', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    // The SDK sends a paused reply and its continuation as two assistant messages, which the real API combines.
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` }, fake: { strictAlternation: false } });
  });
  after(() => h?.close());

  it("a pause_turn reply's continuation is the first answer's, not the follow-up's", async () => {
    const id = (
      await h.api.post('/v1/sessions', {
        start: false,
        tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      })
    ).body.id as string;
    h.fake.enqueue(
      reply(
        [
          textBlock('Searching.'),
          { type: 'server_tool_use', id: 'srvtoolu_f1', name: 'web_search', input: { query: 'x' } },
        ],
        { stop_reason: 'pause_turn', pauseAfterEvents: 2 },
      ),
      reply([
        {
          type: 'web_search_tool_result',
          tool_use_id: 'srvtoolu_f1',
          content: [
            { type: 'web_search_result', url: 'https://example.com', title: 'x', encrypted_content: 'e' },
          ],
        },
        textBlock('Found x.'),
      ]),
      text('The follow-up answered.'),
    );
    const base = h.fake.requests.length;
    const firstMsg = user('first');
    const first = readAll(await sendRaw(h, id, [firstMsg]));
    await h.fake.waitForRequests(base + 1);
    // Queued while the paused reply streams: the continuation (a turn of its own) starts before it joins.
    const second = readAll(await sendRaw(h, id, [firstMsg, user('follow-up')]));
    h.fake.resume();
    const [a, b] = await Promise.all([first, second]);
    await h.api.waitStatus(id, 'idle');
    const history = (await h.api.get(`/v1/chat/${id}/messages`)).body as UIMessage[];
    assert.deepEqual(
      history.map((m) => [m.role, textOf(m)]),
      [
        ['user', 'first'],
        ['assistant', 'Searching.Found x.'],
        ['user', 'follow-up'],
        ['assistant', 'The follow-up answered.'],
      ],
    );
    assert.equal(textOf(a.message), 'Searching.Found x.');
    // Without waiting for its own message to join, the follow-up's stream showed the continuation ("Found x.").
    assert.equal(textOf(b.message), 'The follow-up answered.');
    assert.deepEqual(b.chunks.at(-1), { type: 'finish', finishReason: 'stop' });
  });
});

describe("chat: which queued message is the stream's own", () => {
  const msg = (t: string) => ({ message: { role: 'user', content: [{ type: 'text', text: t }] } });
  const appended = (...texts: string[]) => ({
    index: 3,
    into_last: false,
    role: 'user',
    content: texts.map((t) => ({ type: 'text', text: t })),
  });
  const feed = (t: ChatTranslator, events: Array<[string, unknown]>): UIChunk[] => [
    ...t.start(),
    ...events.flatMap(([type, data]) => t.event(type, data)),
  ];
  const answer: Array<[string, unknown]> = [
    ['turn.started', { iteration: 3 }],
    [
      'turn.completed',
      {
        iteration: 3,
        message: { role: 'assistant', content: [{ type: 'text', text: 'A' }], stop_reason: 'end_turn' },
      },
    ],
  ];

  it("another client's message queued between the post's cursor and its own write: the answer streams", () => {
    const t = new ChatTranslator(undefined, [], { ownMessage: true });
    const out = feed(t, [
      ['message.queued', msg('from REST')],
      ['message.queued', msg('own')],
      ['message.appended', appended('from REST', 'own')],
      ...answer,
    ]);
    // The first queued event was taken for the stream's own: the append of the "other" one ended it empty.
    assert.deepEqual(
      out.map((c) => c.type),
      ['start', 'start-step', 'text-start', 'text-delta', 'text-end'],
    );
    assert.equal(t.done, false);
  });

  it('two tabs posting at once: both answers stream the one answer to both', () => {
    const events: Array<[string, unknown]> = [
      ['message.queued', msg('tab 1')],
      ['message.queued', msg('tab 2')],
      ['message.appended', appended('tab 1', 'tab 2')],
      ...answer,
    ];
    for (const t of [0, 1].map(() => new ChatTranslator(undefined, [], { ownMessage: true })))
      assert.ok(feed(t, events).some((c) => c.type === 'text-delta'));
  });

  /** Events with their revisions (the envelope's `revision`, which the route hands the translator). */
  const feedAt = (t: ChatTranslator, events: Array<[string, unknown, number]>): UIChunk[] => [
    ...t.start(),
    ...events.flatMap(([type, data, rev]) => t.event(type, data, '', rev)),
  ];
  const turnAt = (iteration: number, said: string, rev: number): Array<[string, unknown, number]> => [
    ['turn.started', { iteration }, rev],
    [
      'turn.completed',
      {
        iteration,
        message: { role: 'assistant', content: [{ type: 'text', text: said }], stop_reason: 'end_turn' },
      },
      rev + 1,
    ],
  ];

  it("another client's message queued after the cursor joins alone before the own one is written: passed over", () => {
    // The post's write (revision 8) queued its own message; the REST one (5) joined alone and was answered first.
    const t = new ChatTranslator(undefined, [], { ownMessage: true, ownRevision: 8 });
    const out = feedAt(t, [
      ['message.queued', msg('from REST'), 5],
      ['message.appended', appended('from REST'), 6],
      ...turnAt(3, 'answer to REST', 6),
      ['message.queued', msg('own'), 8],
      ['message.appended', appended('own'), 9],
      ...turnAt(4, 'answer to own', 9),
    ]);
    // The first queued event taken for the own: [start, start-step, "answer to REST", finish-step, finish 'other'].
    assert.deepEqual(
      out.filter((c) => c.type === 'text-delta').map((c) => c['delta']),
      ['answer to own'],
    );
    assert.ok(!out.some((c) => c.type === 'finish'));
    assert.equal(t.done, false);
    // With no revision known (an Idempotency-Key record kept before it was): the first queued event, as before.
    const old = new ChatTranslator(undefined, [], { ownMessage: true });
    const before = feedAt(old, [
      ['message.queued', msg('own'), 8],
      ['message.appended', appended('own'), 9],
      ...turnAt(4, 'answer to own', 9),
    ]);
    assert.ok(before.some((c) => c.type === 'text-delta'));
  });

  it('with revisions: a message queued beside the own one, and two tabs at once, still stream the merged answer', () => {
    // REST (5) queued between the cursor and the own write (6): one append takes both.
    const beside = new ChatTranslator(undefined, [], { ownMessage: true, ownRevision: 6 });
    const out = feedAt(beside, [
      ['message.queued', msg('from REST'), 5],
      ['message.queued', msg('own'), 6],
      ['message.appended', appended('from REST', 'own'), 7],
      ...turnAt(3, 'A', 7),
    ]);
    assert.deepEqual(
      out.map((c) => c.type),
      ['start', 'start-step', 'text-start', 'text-delta', 'text-end'],
    );
    // Two tabs (their writes 5 and 6), one append: each stream's own is in it.
    for (const own of [5, 6]) {
      const t = new ChatTranslator(undefined, [], { ownMessage: true, ownRevision: own });
      const tabs = feedAt(t, [
        ['message.queued', msg('tab 1'), 5],
        ['message.queued', msg('tab 2'), 6],
        ['message.appended', appended('tab 1', 'tab 2'), 7],
        ...turnAt(3, 'A', 7),
      ]);
      assert.ok(
        tabs.some((c) => c.type === 'text-delta'),
        `the tab of write ${own}`,
      );
    }
  });

  it('a follow-up queued after the own message joined still ends the stream', () => {
    const t = new ChatTranslator(undefined, [], { ownMessage: true });
    const out = feed(t, [
      ['message.queued', msg('own')],
      ['message.appended', appended('own')],
      ...answer,
      ['message.queued', msg('later')],
      ['message.appended', appended('later')],
      ['turn.started', { iteration: 4 }],
    ]);
    assert.deepEqual(out.slice(-2), [{ type: 'finish-step' }, { type: 'finish', finishReason: 'other' }]);
  });
});
