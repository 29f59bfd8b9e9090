/**
 * File parts of a user message through POST /v1/chat (spec §7.3), driven by the `ai` package's Chat and transport:
 * a PDF (a base64 data: URL) and a plain text file reach the model as document blocks, GET /v1/chat/:id/messages
 * shows them back as the same file parts (and a Chat seeded from that page goes on without sending them twice), a
 * message of a file alone starts a message of its own (a resumed stream replays only its answer), and a file of any
 * other media type is refused, not dropped.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { validateUIMessages, type FileUIPart, type UIMessage } from 'ai';
import { reply, text, textBlock, toolUse } from '../fake/script.js';
import { PlainChat, chatTransport, readAll, submitRaw } from '../helpers/chat.js';
import { asksUser, isUserBlock } from '../../src/chat/event-shapes.js';
import { toUIMessages } from '../../src/chat/history.js';
import { isUserTurn } from '../../src/chat/record.js';
import { endsWithUserTurn } from '../../src/engine/compaction.js';
import type { StoredMessage } from '../../src/history.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-files-key';
/** A PDF's first bytes ("%PDF-1.4\n"), base64. */
const PDF_DATA = 'JVBERi0xLjQK';
const pdf: FileUIPart = {
  type: 'file',
  mediaType: 'application/pdf',
  filename: 'order.pdf',
  url: `data:application/pdf;base64,${PDF_DATA}`,
};
const NOTE = 'Größe: 42 — délai 3 jours';
const note: FileUIPart = {
  type: 'file',
  mediaType: 'text/plain',
  filename: 'note.txt',
  url: `data:text/plain;base64,${Buffer.from(NOTE, 'utf8').toString('base64')}`,
};
const pdfBlock = {
  type: 'document',
  source: { type: 'base64', media_type: 'application/pdf', data: PDF_DATA },
};
const noteBlock = { type: 'document', source: { type: 'text', media_type: 'text/plain', data: NOTE } };

type Block = { type: string } & Record<string, unknown>;
const blocksOf = (content: unknown): Block[] =>
  typeof content === 'string' ? [{ type: 'text', text: content }] : (content as Block[]);
const textOf = (m: UIMessage | undefined) =>
  (m?.parts ?? []).flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');
/** A file part as the history shows it and a client sends it (no `filename`: the session keeps none). */
const asSent = ({ type, mediaType, url }: FileUIPart) => ({ type, mediaType, url });

describe('chat: file parts', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  async function session() {
    const r = await h.api.post('/v1/sessions', { start: false });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  }
  async function history(id: string) {
    const r = await h.api.get(`/v1/chat/${id}/messages`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return validateUIMessages<UIMessage>({ messages: r.body });
  }
  /** The newest user turn of the conversation the model saw last (`messages`: a thread's whole conversation). */
  const lastUserTurn = () => {
    const messages = h.fake.requests.at(-1)?.messages ?? [];
    return blocksOf(messages.filter((m) => m.role === 'user').at(-1)?.content);
  };
  const post = (body: unknown) =>
    fetch(`${h.service.url}/v1/chat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  /**
   * A session whose chat message "Hello." was answered "First answer.", with a long answer queued for the next turn,
   * held mid-stream: the session, that answer's text, and the number of the fake's request that asks for it.
   */
  async function answeredThenHeld() {
    const id = await session();
    const chat = new PlainChat({ id, transport: chatTransport(h.service.url, KEY) });
    h.fake.enqueue(text('First answer.'));
    const done = chat.nextFinish();
    await chat.sendMessage({ text: 'Hello.' });
    await done;
    await h.api.waitStatus(id, 'idle');
    const long = Array.from({ length: 20 }, (_, i) => `p${i}`).join(' ');
    h.fake.enqueue(text(long, { pauseAfterEvents: 4 }));
    return { id, long, held: h.fake.requests.length + 1 };
  }
  /** A Chat seeded with `messages` (a reloaded page) whose resumed stream lets the fake's held answer go on. */
  function reloadedChat(id: string, messages: UIMessage[]): PlainChat {
    const reloaded: PlainChat = new PlainChat({
      id,
      messages,
      transport: chatTransport(h.service.url, KEY),
      onChange: () => void (reloaded?.status === 'streaming' && h.fake.held > 0 && h.fake.resume()),
    });
    return reloaded;
  }

  it('a PDF alone, then text with a PDF and a text file: the model gets them as document blocks; the history shows them back', async () => {
    const id = await session();
    const chat = new PlainChat({ id, transport: chatTransport(h.service.url, KEY) });
    h.fake.enqueue(text('A one-page PDF.'));
    let done = chat.nextFinish();
    await chat.sendMessage({ files: [pdf] });
    await done;
    assert.equal(chat.error, undefined);
    assert.deepEqual(lastUserTurn(), [pdfBlock]);
    assert.equal(textOf(chat.messages.at(-1)), 'A one-page PDF.');

    h.fake.enqueue(text('Both read.'));
    done = chat.nextFinish();
    await chat.sendMessage({ text: 'Compare these.', files: [pdf, note] });
    await done;
    assert.equal(chat.error, undefined);
    assert.deepEqual(
      lastUserTurn().filter((b) => b.type === 'document'),
      [pdfBlock, noteBlock],
    );
    assert.ok(lastUserTurn().some((b) => b.type === 'text' && b['text'] === 'Compare these.'));
    await h.api.waitStatus(id, 'idle');

    // The page shows each file message as a user message of its own, with the file parts the client sent.
    const page = await history(id);
    assert.deepEqual(
      page.map((m) => m.role),
      ['user', 'assistant', 'user', 'assistant'],
    );
    assert.deepEqual(page[0]!.parts, [asSent(pdf)]);
    assert.deepEqual(
      page[2]!.parts.filter((p) => p.type === 'file'),
      [asSent(pdf), asSent(note)],
    );
    assert.equal(textOf(page[2]), 'Compare these.');

    // Sent back as the page shows it (the client's own id, as after a lost answer): the same message, not posted
    // again, so its blocks are the ones first posted.
    const sent = chat.messages[2]!;
    const again = await post({
      id,
      trigger: 'submit-message',
      messages: [{ id: sent.id, role: 'user', parts: page[2]!.parts }],
    });
    assert.equal(again.status, 200, await again.clone().text());
    await again.text();

    // A Chat seeded from the page goes on: only the new message is posted, the files are not sent twice.
    const seeded = new PlainChat({ id, messages: page, transport: chatTransport(h.service.url, KEY) });
    h.fake.enqueue(text('You are welcome.'));
    const before = h.fake.requests.length;
    done = seeded.nextFinish();
    await seeded.sendMessage({ text: 'Thanks.' });
    await done;
    assert.equal(seeded.error, undefined);
    assert.equal(h.fake.requests.length, before + 1);
    const sentToModel = (h.fake.requests.at(-1)?.messages ?? []).flatMap((m) => blocksOf(m.content));
    assert.equal(sentToModel.filter((b) => b.type === 'document').length, 3, 'each file once');
    const users = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data.filter(
      (m: { role: string }) => m.role === 'user',
    );
    assert.equal(users.length, 3);
    await h.api.waitStatus(id, 'idle');
    assert.deepEqual(
      (await history(id)).map((m) => m.role),
      ['user', 'assistant', 'user', 'assistant', 'user', 'assistant'],
    );
  });

  it('a message of a PDF alone starts a message of its own: a reload mid-run replays only its answer', async () => {
    // The PDF's answer is held mid-stream; its POST's stream is let go (the page reloads).
    const { id, long, held } = await answeredThenHeld();
    const stream = await submitRaw(h.service.url, KEY, id, [{ id: 'u-pdf', role: 'user', parts: [pdf] }]);
    await h.fake.waitForRequests(held);
    await stream.cancel();
    const initial = await history(id);
    assert.deepEqual(
      initial.map((m) => m.role),
      ['user', 'assistant', 'user'],
    );
    const reloaded = reloadedChat(id, initial);
    await reloaded.resumeStream();
    assert.equal(reloaded.error, undefined);
    assert.deepEqual(
      reloaded.messages.map((m) => m.role),
      ['user', 'assistant', 'user', 'assistant'],
    );
    assert.equal(
      textOf(reloaded.messages[3]),
      long,
      'the answer to the PDF, and nothing of the first answer',
    );
    await h.api.waitStatus(id, 'idle');
    assert.deepEqual(JSON.parse(JSON.stringify(reloaded.messages)), await history(id));
  });

  // POST …/messages takes files the chat has no part for (a document of source `content` or `file`, an image of source
  // `file`): the page shows no user message there, so the answer after one continues the assistant message before it,
  // and a resumed stream must too (run-start-2.lua `asks`, record.ts `isUserTurn`), or a Chat seeded from the page
  // and resumed lost the first answer.
  for (const [type, source] of [
    ['document', { type: 'content', content: 'Some notes.' }],
    ['document', { type: 'file', file_id: 'file_abc' }],
    ['image', { type: 'file', file_id: 'file_img' }],
  ] as const)
    it(`a REST ${type} of source ${source.type} alone: a reload mid-run keeps the answer before it`, async () => {
      const { id, long, held } = await answeredThenHeld();
      const r = await h.api.post(`/v1/sessions/${id}/messages`, { content: [{ type, source }] });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      await h.fake.waitForRequests(held);
      assert.deepEqual(lastUserTurn(), [{ type, source }], 'the model got the block');
      const initial = await history(id);
      assert.deepEqual(
        initial.map((m) => [m.role, textOf(m)]),
        [
          ['user', 'Hello.'],
          ['assistant', 'First answer.'],
        ],
      );
      const reloaded = reloadedChat(id, initial);
      await reloaded.resumeStream();
      assert.equal(reloaded.error, undefined);
      await h.api.waitStatus(id, 'idle');
      const final = await history(id);
      assert.deepEqual(
        final.map((m) => [m.role, textOf(m)]),
        [
          ['user', 'Hello.'],
          ['assistant', `First answer.${long}`],
        ],
      );
      assert.deepEqual(
        reloaded.messages.map((m) => [m.id, m.role, textOf(m)]),
        final.map((m) => [m.id, m.role, textOf(m)]),
        'the resumed stream continues the first answer, as the page does',
      );
    });

  it('a PDF alone sent while the run streams: the first stream ends where it joins, its own carries the answer', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false, tools: ['get_weather'] })).body.id as string;
    const long = Array.from({ length: 12 }, (_, i) => `w${i}`).join(' ');
    h.fake.enqueue(
      reply([textBlock('Checking.'), toolUse('get_weather', { location: 'Paris' })], { pauseAfterEvents: 2 }),
      text(long, { eventDelayMs: 5 }),
    );
    const base = h.fake.requests.length;
    const send = (messages: UIMessage[]) => submitRaw(h.service.url, KEY, id, messages);
    const firstMsg: UIMessage = { id: 'u-first', role: 'user', parts: [{ type: 'text', text: 'Weather?' }] };
    const first = readAll(await send([firstMsg]));
    await h.fake.waitForRequests(base + 1);
    const second = readAll(await send([firstMsg, { id: 'u-pdf-2', role: 'user', parts: [pdf] }]));
    h.fake.resume();
    const [a, b] = await Promise.all([first, second]);
    // The follow-up is a user turn of its own (a document alone): the first answer ends as it joins.
    assert.deepEqual(a.chunks.at(-1), { type: 'finish', finishReason: 'other' });
    assert.equal(textOf(a.message), 'Checking.');
    assert.equal(textOf(b.message), long);
    await h.api.waitStatus(id, 'idle');
    const page = await history(id);
    assert.deepEqual(
      page.map((m) => m.role),
      ['user', 'assistant', 'user', 'assistant'],
    );
    assert.equal(a.message?.id, page[1]!.id);
    assert.equal(textOf(page[3]), long);
  });

  it('a file of another media type, or a text file that is not UTF-8: 400 invalid_request, nothing posted', async () => {
    const id = await session();
    const send = (parts: unknown[]) =>
      post({ id, trigger: 'submit-message', messages: [{ id: `u-${parts.length}`, role: 'user', parts }] });
    const zip = { type: 'file', mediaType: 'application/zip', url: 'data:application/zip;base64,UEsDBA==' };
    for (const parts of [[{ type: 'text', text: 'Unpack this.' }, zip], [zip]]) {
      const res = await send(parts);
      assert.equal(res.status, 400);
      const { error } = await res.json();
      assert.equal(error.code, 'invalid_request');
      assert.match(error.message, /application\/zip/);
      assert.equal(error.details.mediaType, 'application/zip');
      assert.ok(error.details.accepted.includes('application/pdf'));
      assert.ok(error.details.accepted.includes('text/plain'));
    }
    const latin1 = {
      type: 'file',
      mediaType: 'text/plain',
      url: `data:text/plain;base64,${Buffer.from([0x47, 0x72, 0xf6, 0xdf, 0x65]).toString('base64')}`,
    };
    const res = await send([latin1]);
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, 'invalid_request');
    assert.equal((await h.api.get(`/v1/sessions/${id}/messages`)).body.data.length, 0);
    assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'idle');
  });
});

describe('chat: which user turns are user messages', () => {
  // Every place that counts the chat's user turns makes the page's own test (history.ts `userPart`): a turn is a
  // user message when the page shows a part of it, and only then (run-start-2.lua `asks` is checked live above).
  const cases: Array<[string, Block, boolean]> = [
    ['text', { type: 'text', text: 'Hi.' }, true],
    [
      'image base64',
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBO' } },
      true,
    ],
    ['image url', { type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }, true],
    ['image file', { type: 'image', source: { type: 'file', file_id: 'file_img' } }, false],
    ['document base64', pdfBlock, true],
    ['document url', { type: 'document', source: { type: 'url', url: 'https://example.com/a.pdf' } }, true],
    ['document text', noteBlock, true],
    ['document content', { type: 'document', source: { type: 'content', content: 'Some notes.' } }, false],
    ['document file', { type: 'document', source: { type: 'file', file_id: 'file_abc' } }, false],
    ['tool_result', { type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }, false],
  ];
  for (const [name, block, shown] of cases)
    it(`a user turn of ${name} alone: ${shown ? 'a user message' : 'no user message'} everywhere`, () => {
      const turn: StoredMessage = { role: 'user', content: [block] };
      const reply: StoredMessage = { role: 'assistant', content: [{ type: 'text', text: 'Before.' }] };
      const page = toUIMessages('ses_x', [reply, turn], 0, null);
      assert.equal(page.at(-1)?.role === 'user', shown, 'the page');
      assert.equal(isUserBlock(block), shown, 'isUserBlock');
      assert.equal(isUserTurn(turn), shown, 'record.ts isUserTurn');
      assert.equal(asksUser({ role: 'user', content: [block] }), shown, 'event-shapes.ts asksUser');
      assert.equal(endsWithUserTurn([reply, turn]), shown, 'compaction.ts endsWithUserTurn');
    });
});
