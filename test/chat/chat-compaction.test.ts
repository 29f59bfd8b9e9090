/**
 * A chat reloaded after compactions (spec §7.3 with §6.1): GET /v1/chat/:id/messages shows the conversation as the
 * user saw it — the turns the compactions summarized (from the kept segments), then the turns after — with no part
 * for a summary, ids that agree with the ones the live stream gave (a message a compaction cut in two is one message
 * under its first id), denials before a compaction still `output-denied`, and a `Chat` seeded with that page goes
 * on: its next message is posted once and nothing before the compaction is posted again.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { lastAssistantMessageIsCompleteWithApprovalResponses, validateUIMessages, type UIMessage } from 'ai';
import { offlineHandler, type FakeReply } from '../fake/server.js';
import { reply, text, toolUse } from '../fake/script.js';
import { Redis } from 'ioredis';
import { PlainChat, chatTransport } from '../helpers/chat.js';
import { monitorRedis } from '../helpers/redis-monitor.js';
import { SEGMENT_MESSAGES, SEGMENTS } from '../../src/chat/record.js';
import { endsWithUserTurn } from '../../src/engine/compaction.js';
import { SEGMENT_SIZES_KEPT } from '../../src/store/apply-ops.js';
import type { StoredMessage } from '../../src/history.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-compaction-key';

const textOf = (m: UIMessage | undefined) =>
  (m?.parts ?? []).flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');
/** What a reader sees of a chat: each message's role and text. */
const view = (ms: UIMessage[]) => ms.map((m) => [m.role, textOf(m)]);
/** The user texts of a list of Messages API messages. */
const userTexts = (ms: ReadonlyArray<{ role: string; content?: unknown }>) =>
  ms.flatMap((m) =>
    m.role !== 'user'
      ? []
      : typeof m.content === 'string'
        ? [m.content]
        : (m.content as Array<{ type: string; text?: string }>).flatMap((b) =>
            b.type === 'text' && b.text ? [b.text] : [],
          ),
  );

describe('chat history after compactions', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  /** The page a reloaded `useChat` gets, validated by the `ai` package. */
  async function reload(id: string): Promise<UIMessage[]> {
    const r = await h.api.get(`/v1/chat/${id}/messages`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return validateUIMessages<UIMessage>({ messages: r.body });
  }

  it('a reload after an idle compaction and one inside a run: every turn in order, the live ids, the denial; a Chat seeded with it goes on', async () => {
    // Model turns come from `script`, in order; compaction requests are answered by the offline model (a summary).
    const script: Array<FakeReply | (() => Promise<FakeReply>)> = [];
    h.fake.setHandler(async (req, i) => {
      if (req.body.compaction) return offlineHandler(req, i);
      const next = script.shift();
      assert.ok(next, `no scripted turn for request ${i}`);
      return typeof next === 'function' ? next() : next;
    });
    const id = (
      await h.api.post('/v1/sessions', {
        start: false,
        tools: ['get_weather', 'calculate_sum'],
        approval: ['get_weather'],
      })
    ).body.id as string;
    const chat = new PlainChat({
      id,
      transport: chatTransport(h.service.url, KEY),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    const say = async (t: string) => {
      const done = chat.nextFinish();
      await chat.sendMessage({ text: t });
      await done;
    };

    // 1. A call the user denies, then the answer.
    script.push(
      reply([toolUse('get_weather', { location: 'Paris' }, 'toolu_denied')]),
      text('Fine, I will not.'),
    );
    await chat.sendMessage({ text: 'First question: the weather in Paris?' });
    const denied = chat.nextFinish();
    await chat.addToolApprovalResponse({ id: 'toolu_denied', approved: false, reason: 'not now' });
    await denied;
    // 2. A plain turn.
    script.push(text('Second answer.'));
    await say('Second question.');
    await h.api.waitStatus(id, 'idle');

    // A compaction while idle: the history becomes its summary alone.
    const c1 = await h.api.post(`/v1/sessions/${id}/compact`);
    assert.equal(c1.status, 202, JSON.stringify(c1.body));
    await h.api.waitFor(id, (s) => s.status === 'idle' && !s.compaction_pending);

    // 3. A turn after it.
    script.push(text('Third answer.'));
    await say('Third question.');

    // 4. A compaction inside a run: after the turn's tool call, before the model answers.
    let reached!: () => void;
    const atTurn = new Promise<void>((resolve) => (reached = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    script.push(async () => {
      reached();
      await gate;
      return reply([toolUse('calculate_sum', { a: 2, b: 3 }, 'toolu_sum')]);
    }, text('The sum is 5.'));
    const fourth = chat.nextFinish();
    const sending = chat.sendMessage({ text: 'Fourth question: 2 plus 3?' });
    await atTurn;
    const c2 = await h.api.post(`/v1/sessions/${id}/compact`);
    assert.equal(c2.status, 202, JSON.stringify(c2.body));
    release();
    await sending;
    await fourth;
    await h.api.waitFor(id, (s) => s.status === 'idle' && !s.compaction_pending);

    const rest = (await h.api.get(`/v1/sessions/${id}/messages?include=compacted`)).body;
    assert.equal(rest.compacted.length, 2, 'two compactions, two kept segments');
    assert.equal(rest.data[0].content[0].type, 'compaction');

    // The reload: what the user saw live, in order, with the ids the live stream gave.
    const live = chat.messages;
    assert.deepEqual(view(live), [
      ['user', 'First question: the weather in Paris?'],
      ['assistant', 'Fine, I will not.'],
      ['user', 'Second question.'],
      ['assistant', 'Second answer.'],
      ['user', 'Third question.'],
      ['assistant', 'Third answer.'],
      ['user', 'Fourth question: 2 plus 3?'],
      ['assistant', 'The sum is 5.'],
    ]);
    const page = await reload(id);
    assert.deepEqual(view(page), view(live));
    const assistantIds = (ms: UIMessage[]) => ms.filter((m) => m.role === 'assistant').map((m) => m.id);
    assert.deepEqual(assistantIds(page), assistantIds(live), 'the ids the live stream gave');
    assert.deepEqual(
      (await reload(id)).map((m) => m.id),
      page.map((m) => m.id),
      'ids are stable across reloads',
    );
    // No part for a summary: the message cut by the compaction has the steps the stream showed, nothing else.
    assert.deepEqual(
      page.at(-1)!.parts.map((p) => p.type),
      live.at(-1)!.parts.map((p) => p.type),
    );
    assert.deepEqual(
      page.at(-1)!.parts.map((p) => p.type),
      ['step-start', 'tool-calculate_sum', 'step-start', 'text'],
    );
    for (const m of page) assert.ok(textOf(m) !== '', `no empty message: ${JSON.stringify(m)}`);
    // The denial before both compactions is still a denial.
    const part = page[1]!.parts.find((p) => p.type === 'tool-get_weather') as Record<string, unknown>;
    assert.equal(part['state'], 'output-denied');
    assert.deepEqual(part['approval'], { id: 'toolu_denied', approved: false, reason: 'not now' });

    // A Chat seeded with the page (the reloaded `useChat`) goes on.
    const again = new PlainChat({ id, messages: page, transport: chatTransport(h.service.url, KEY) });
    script.push(text('Fifth answer.'));
    const sent = h.fake.requests.length;
    const fifth = again.nextFinish();
    await again.sendMessage({ text: 'Fifth question.' });
    await fifth;
    assert.deepEqual(view(again.messages), [
      ...view(page),
      ['user', 'Fifth question.'],
      ['assistant', 'Fifth answer.'],
    ]);
    // One model request, from the newest summary: the new question once, nothing from before the compaction.
    assert.equal(h.fake.requests.length, sent + 1);
    const request = h.fake.requests.at(-1)!;
    assert.equal((request.messages[0]!.content as Array<{ type: string }>)[0]!.type, 'compaction');
    assert.deepEqual(userTexts(request.messages), ['Fifth question.']);
    const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.deepEqual(userTexts(history), ['Fifth question.']);
    // The next reload shows the same, with the ids this Chat holds.
    const last = await reload(id);
    assert.deepEqual(view(last), view(again.messages));
    assert.deepEqual(assistantIds(last), assistantIds(again.messages));
    h.fake.setHandler(null);
  });

  it('a page reloaded mid-run after a compaction inside the run: the message under its live id, which the resumed stream continues', async () => {
    let reached!: () => void;
    const atTurn = new Promise<void>((resolve) => (reached = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let turns = 0;
    let firstTurnHeld!: () => void;
    const firstHeld = new Promise<void>((resolve) => (firstTurnHeld = resolve));
    let releaseFirst!: () => void;
    const firstGate = new Promise<void>((resolve) => (releaseFirst = resolve));
    h.fake.setHandler(async (req, i) => {
      if (req.body.compaction) return offlineHandler(req, i);
      turns++;
      if (turns === 1) return text('An answer before.');
      if (turns === 2) {
        firstTurnHeld();
        await firstGate;
        return reply([toolUse('calculate_sum', { a: 2, b: 3 }, 'toolu_sum2')]);
      }
      // The turn after the compaction waits until the page is reloaded.
      reached();
      await gate;
      return text('The sum is 5.');
    });
    const id = (await h.api.post('/v1/sessions', { start: false, tools: ['calculate_sum'] })).body
      .id as string;
    const chat = new PlainChat({ id, transport: chatTransport(h.service.url, KEY) });
    const one = chat.nextFinish();
    await chat.sendMessage({ text: 'Say something.' });
    await one;
    const two = chat.nextFinish();
    const sending = chat.sendMessage({ text: 'What is 2 plus 3?' });
    await firstHeld;
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`)).status, 202);
    releaseFirst();
    await atTurn;
    // The compaction is done, the model's turn after it is in flight: the page reloads now.
    const rest = (await h.api.get(`/v1/sessions/${id}/messages?include=compacted`)).body;
    assert.equal(rest.compacted.length, 1);
    assert.deepEqual(
      rest.data.map((m: { role: string }) => m.role),
      ['assistant'],
      'the summary alone',
    );
    const page = await reload(id);
    const liveId = chat.messages.at(-1)!.id;
    assert.deepEqual(
      page.map((m) => [m.role, m.id === liveId]),
      [
        ['user', false],
        ['assistant', false],
        ['user', false],
        ['assistant', true],
      ],
    );
    assert.deepEqual(
      page[3]!.parts.map((p) => p.type),
      ['step-start', 'tool-calculate_sum'],
    );
    // The reloaded page resumes the run: the replay replaces the message it shows, never adds one.
    // The model's turn goes on once the replay streams (the run is still active when the stream is asked for).
    const resumed: PlainChat = new PlainChat({
      id,
      messages: page,
      transport: chatTransport(h.service.url, KEY),
      onChange: () => void (resumed?.status === 'streaming' && release()),
    });
    await resumed.resumeStream();
    await sending;
    await two;
    assert.equal(resumed.messages.length, 4);
    assert.equal(resumed.messages[3]!.id, liveId);
    assert.equal(textOf(resumed.messages[3]), 'The sum is 5.');
    assert.deepEqual(view(resumed.messages), view(chat.messages));
    const last = await reload(id);
    assert.deepEqual(
      last.map((m) => m.id),
      resumed.messages.map((m) => m.id),
    );
    assert.deepEqual(view(last), view(chat.messages));
    h.fake.setHandler(null);
  });

  it("a message to a session with a compaction due: the compaction comes first and the message after its summary (or, after a failed tool step, joins its results and is summarized); the page and the resumed stream name the answer as the POST's start did", async () => {
    // `ends`: how the first run left the history. `answer`: an answer; `results`: the results turn of a tool step (the
    // run stopped at max_iterations). The compaction the last turn made due is made before the message joins: the
    // segment holds the history as the run left it, the message follows the summary. `failed step`: a tool step that
    // failed; the message accepts its results and joins them, and the compaction at the run's start summarizes the
    // message with them: its summary stands where the answer was going to be, and the page names the answer by it.
    // `huge`: the first question or answer is 9 MiB, so the segment the compaction makes is too large for the page
    // to read: after a failed step the page names the answer from what the compaction kept with the segment (it ends
    // with a user turn), and starts with that answer; else the page starts with the message after the summary.
    for (const [ends, huge] of [
      ['results', false],
      ['answer', false],
      ['answer', true],
      ['failed step', false],
      ['failed step', true],
    ] as const) {
      const variant = `${ends}, huge: ${huge}`;
      const script: Array<FakeReply | (() => Promise<FakeReply>)> = [];
      h.fake.setHandler(async (req, i) => {
        if (req.body.compaction) return offlineHandler(req, i);
        const next = script.shift();
        assert.ok(next, `no scripted turn for request ${i}`);
        return typeof next === 'function' ? next() : next;
      });
      const failedStep = ends === 'failed step';
      let id: string;
      let chat: PlainChat;
      if (failedStep) {
        // The first run fails its tool step; a Chat seeded with the page goes on from it.
        script.push(reply([toolUse('evaluate_expression', { expression: '1/' }, `toolu_f_${Date.now()}`)]));
        id = (
          await h.api.post('/v1/sessions', {
            input: 'First question.',
            tools: ['evaluate_expression'],
            on_tool_error: 'fail',
          })
        ).body.id as string;
        const failed = await h.api.waitStatus(id, ['idle', 'failed']);
        assert.equal(failed.status, 'failed', variant);
        chat = new PlainChat({
          id,
          transport: chatTransport(h.service.url, KEY),
          messages: await reload(id),
        });
      } else {
        id = (
          await h.api.post('/v1/sessions', {
            start: false,
            tools: ['calculate_sum'],
            max_iterations: ends === 'results' ? 1 : 10,
          })
        ).body.id as string;
        chat = new PlainChat({ id, transport: chatTransport(h.service.url, KEY) });
        script.push(
          ends === 'results'
            ? reply([toolUse('calculate_sum', { a: 1, b: 2 }, `toolu_m_${id}`)])
            : text('First answer.'),
        );
        const first = chat.nextFinish();
        await chat.sendMessage({ text: 'First question.' });
        await first;
        const idle = await h.api.waitStatus(id, 'idle');
        assert.equal(idle.stop_reason, ends === 'results' ? 'max_iterations' : 'end_turn');
      }
      if (huge) {
        const r = new Redis(h.redis.url);
        try {
          const big = 'x'.repeat(9 * 1024 * 1024);
          // The answer, or (before a failed step's call) the question.
          const at = failedStep ? 0 : 1;
          const role = failedStep ? 'user' : 'assistant';
          await r.lset(`s:{${id}}:m`, at, JSON.stringify({ role, content: [{ type: 'text', text: big }] }));
        } finally {
          r.disconnect();
        }
      }
      // The policy compacts before the next run's first turn (the last turn's input passed it).
      const patched = await h.api.req('PATCH', `/v1/sessions/${id}`, {
        compaction: { at_input_tokens: 1 },
        max_iterations: 10,
      });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      const requestsBefore = h.fake.requests.length;
      let reached!: () => void;
      const atTurn = new Promise<void>((resolve) => (reached = resolve));
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      script.push(async () => {
        reached();
        await gate;
        return text('Second answer.');
      });
      const second = chat.nextFinish();
      const sending = chat.sendMessage({ text: 'Second question.' });
      await atTurn;
      // The compaction is in; the answer's turn is in flight: a resumed stream names the message it continues.
      const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
      assert.equal(history[0].content[0].type, 'compaction');
      // The message is summarized only when it joined a failed step's results; else it follows the summary.
      const [compaction] = h.fake.requests.slice(requestsBefore);
      assert.ok(compaction?.body.compaction, variant);
      assert.equal(userTexts(compaction.messages).includes('Second question.'), failedStep, variant);
      assert.deepEqual(userTexts(history), failedStep ? [] : ['Second question.'], variant);
      const r = new Redis(h.redis.url);
      try {
        const entries = (await r.hget(`s:{${id}}`, 'seg_bytes'))!.split(' ');
        assert.match(entries.at(-1)!, failedStep ? /,u$/ : /,a$/, variant);
      } finally {
        r.disconnect();
      }
      const resumed = await fetch(`${h.service.url}/v1/chat/${id}/stream`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      assert.equal(resumed.status, 200);
      const reader = resumed.body!.getReader();
      let head = '';
      while (!head.includes('\n\n')) {
        const { value, done } = await reader.read();
        assert.ok(!done);
        head += new TextDecoder().decode(value);
      }
      await reader.cancel();
      const start = JSON.parse(head.slice(head.indexOf('data: ') + 6, head.indexOf('\n\n'))) as {
        type: string;
        messageId?: string;
      };
      release();
      await sending;
      await second;
      await h.api.waitStatus(id, 'idle');
      const live = chat.messages.at(-1)!;
      assert.equal(textOf(live), 'Second answer.');
      assert.deepEqual(start, { type: 'start', messageId: live.id }, variant);
      const { page, sent } = await reloadWatched(id);
      // Nothing of the segment is read when it is too large: the page starts after it — with the answer alone when
      // its question is in the segment, else with the question that followed the summary.
      const expected = !huge
        ? view(chat.messages)
        : failedStep
          ? [['assistant', 'Second answer.']]
          : [
              ['user', 'Second question.'],
              ['assistant', 'Second answer.'],
            ];
      assert.deepEqual(view(page), expected, variant);
      assert.ok(sent < 1024 * 1024, `${sent} bytes sent`);
      assert.equal(page.at(-1)!.id, live.id, `${variant}: the id the POST's start gave`);
    }
    h.fake.setHandler(null);
  });

  it("17 compactions in one run, the first at its start: the page and the resumed stream name the answer as the POST's start did, from the flag of the segment below the 16 read", async () => {
    const script: Array<FakeReply | (() => Promise<FakeReply>)> = [];
    h.fake.setHandler(async (req, i) => {
      if (req.body.compaction) return offlineHandler(req, i);
      const next = script.shift();
      assert.ok(next, `no scripted turn for request ${i}`);
      return typeof next === 'function' ? next() : next;
    });
    try {
      // The first run fails its tool step: the next message joins its results, so the compaction at the next run's
      // start summarizes the question (a compaction due when a run ended with its turn comes before the message).
      script.push(reply([toolUse('evaluate_expression', { expression: '1/' }, `toolu_f_${Date.now()}`)]));
      const id = (
        await h.api.post('/v1/sessions', {
          input: 'First question.',
          tools: ['calculate_sum', 'evaluate_expression'],
          on_tool_error: 'fail',
          max_iterations: 40,
        })
      ).body.id as string;
      assert.equal((await h.api.waitStatus(id, ['idle', 'failed'])).status, 'failed');
      const chat = new PlainChat({
        id,
        transport: chatTransport(h.service.url, KEY),
        messages: await reload(id),
      });
      // The policy compacts before every turn of the next run: at its start (segment 0 ends with the question),
      // then before each of its 16 turns after a tool step (segments 1..16, each ending with results).
      const patched = await h.api.req('PATCH', `/v1/sessions/${id}`, { compaction: { at_input_tokens: 1 } });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      for (let k = 0; k < 16; k++)
        script.push(reply([toolUse('calculate_sum', { a: k, b: 1 }, `toolu_${k}_${id}`)]));
      let reached!: () => void;
      const atTurn = new Promise<void>((resolve) => (reached = resolve));
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      script.push(async () => {
        reached();
        await gate;
        return text('Second answer.');
      });
      const second = chat.nextFinish();
      const sending = chat.sendMessage({ text: 'Second question.' });
      await atTurn;
      const r = new Redis(h.redis.url);
      try {
        assert.equal(await r.llen(`s:{${id}}:c`), 17);
        // The flag of segment 0, which a page reading segments 16..1 does not read, is kept: it ends with a user turn.
        const [count, ...entries] = (await r.hget(`s:{${id}}`, 'seg_bytes'))!.split(' ');
        assert.equal(count, '17');
        assert.equal(entries.length, 17);
        assert.match(entries[0]!, /,u$/);
      } finally {
        r.disconnect();
      }
      // The last turn in flight: a resumed stream names the message it continues.
      const resumed = await fetch(`${h.service.url}/v1/chat/${id}/stream`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      assert.equal(resumed.status, 200);
      const reader = resumed.body!.getReader();
      let head = '';
      while (!head.includes('\n\n')) {
        const { value, done } = await reader.read();
        assert.ok(!done);
        head += new TextDecoder().decode(value);
      }
      await reader.cancel();
      const start = JSON.parse(head.slice(head.indexOf('data: ') + 6, head.indexOf('\n\n'))) as {
        type: string;
        messageId?: string;
      };
      release();
      await sending;
      await second;
      await h.api.waitStatus(id, 'idle');
      const live = chat.messages.at(-1)!;
      assert.equal(textOf(live), 'Second answer.');
      assert.deepEqual(start, { type: 'start', messageId: live.id }, 'the resumed stream');
      // The page reads the 16 newest segments: the answer alone (its question is in segment 0), under the live id.
      const page = await reload(id);
      assert.deepEqual(
        page.map((m) => [m.id, m.role, textOf(m)]),
        [[live.id, 'assistant', 'Second answer.']],
      );
    } finally {
      h.fake.setHandler(null);
    }
  });

  /**
   * A reload of `id`'s page, watched: the kept segments it asked Redis for (`asked`: their indexes, by LINDEX or the
   * weighing script, in order), those a script copied to weigh them (`weighed`), and the bytes Redis sent meanwhile.
   */
  async function reloadWatched(id: string) {
    const key = `s:{${id}}:c`;
    const r = new Redis(h.redis.url);
    const sentBytes = async () => Number(/total_net_output_bytes:(\d+)/.exec(await r.info('stats'))![1]);
    try {
      const monitor = await monitorRedis(h.redis.port);
      const before = await sentBytes();
      const page = await reload(id);
      await monitor.settle();
      const sent = (await sentBytes()) - before;
      monitor.stop();
      const asked = monitor.commands.flatMap((a) => {
        const cmd = a[0]!.toLowerCase();
        if (cmd === 'lindex' && a[1] === key) return [a[2]!];
        return (cmd === 'evalsha' || cmd === 'eval') && a[3] === key ? [a[4]!] : [];
      });
      const weighed = monitor.scripted.flatMap((a) =>
        a[0]!.toLowerCase() === 'lindex' && a[1] === key ? [a[2]!] : [],
      );
      return { page, asked, weighed, sent };
    } finally {
      r.disconnect();
    }
  }

  /** A session of one turn, compacted while idle: its id and the summary its history now starts with. */
  async function compactedOnce(): Promise<{ id: string; summary: unknown }> {
    h.fake.enqueue(text('First answer.'));
    const id = (await h.api.post('/v1/sessions', { input: 'First question.' })).body.id as string;
    await h.api.waitStatus(id, 'idle');
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`)).status, 202);
    await h.api.waitFor(id, (x) => x.status === 'idle' && !x.compaction_pending);
    const summary = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data[0];
    return { id, summary };
  }

  /**
   * Appends kept segments `ks` to session `id` as the compaction script writes them (each the summary before it, the
   * question `Question <k>.`, then `replies(k)`): pushSegments.
   */
  async function keepSegments(
    id: string,
    summary: unknown,
    ks: number[],
    replies: (k: number) => unknown[],
    lengths: 'kept' | 'none' | 'untouched' = 'kept',
  ) {
    const segments = ks.map((k) => ({
      at_iteration: k,
      messages: [
        summary,
        { role: 'user', content: [{ type: 'text', text: `Question ${k}.` }] },
        ...replies(k),
      ],
    }));
    await pushSegments(id, segments, lengths);
  }

  /**
   * Appends `segments` to session `id`'s kept segments as the compaction script writes them, grows `msg_base` by their
   * messages and, with `lengths` `kept`, adds their entries to `seg_bytes` (the newest 17 kept, anchored by the
   * segment count; `u` for one that ends with a user turn) as apply-8.lua does; `none`: as a version that kept no
   * lengths wrote them (no `seg_bytes`); `untouched`: as a compaction of such a version run by a replica beside newer
   * ones (`seg_bytes` left as it was). The history is left as it is.
   */
  async function pushSegments(
    id: string,
    segments: Array<{ at_iteration: number; messages: unknown[] }>,
    lengths: 'kept' | 'none' | 'untouched' = 'kept',
  ) {
    const r = new Redis(h.redis.url);
    try {
      const json = segments.map((x) => JSON.stringify(x));
      const before = await r.llen(`s:{${id}}:c`);
      const count = await r.rpush(`s:{${id}}:c`, ...json);
      await r.hincrby(
        `s:{${id}}`,
        'msg_base',
        segments.reduce((n, x) => n + x.messages.length, 0),
      );
      if (lengths === 'none') await r.hdel(`s:{${id}}`, 'seg_bytes');
      else if (lengths === 'kept') {
        const [anchor, ...entries] = ((await r.hget(`s:{${id}}`, 'seg_bytes')) ?? '').split(' ');
        const kept = [
          ...(anchor === String(before) ? entries : []),
          ...json.map((x, j) => {
            const { at_iteration: at, messages } = segments[j]!;
            const flag = endsWithUserTurn(messages as StoredMessage[]) ? 'u' : 'a';
            return `${Buffer.byteLength(x)},${at},${flag}`;
          }),
        ].slice(-SEGMENT_SIZES_KEPT);
        await r.hset(`s:{${id}}`, 'seg_bytes', [count, ...kept].join(' '));
      }
    } finally {
      r.disconnect();
    }
  }

  it('a session with many kept messages: the page reads the newest segments only, one by one, and shows a message cut by the bound from its first message read', async () => {
    const { id, summary } = await compactedOnce();
    // Three more compactions of long tool-less runs, as the store keeps them: each segment starts with the summary
    // before it, then a question and 2498 replies (one assistant message of 2498 steps). Written as the compaction
    // script writes them (segments appended, `msg_base` grown by their messages), so 7500 messages before the history.
    const size = 2500;
    await keepSegments(id, summary, [2, 3, 4], (k) =>
      Array.from({ length: size - 2 }, (_, j) => ({
        role: 'assistant',
        content: [{ type: 'text', text: `Step ${k}.${j}.` }],
      })),
    );
    const base = 2 + 3 * size;

    const monitor = await monitorRedis(h.redis.port);
    const page = await reload(id);
    await monitor.settle();
    monitor.stop();
    // The segments read: the newest (index 3), then the one before (2), cut at the bound; never the whole list.
    const reads = monitor.commands.filter((a) => a[1] === `s:{${id}}:c`);
    assert.deepEqual(
      reads.map((a) => [a[0]!.toLowerCase(), a[2]]),
      [
        ['llen', undefined],
        ['lindex', '3'],
        ['lindex', '2'],
      ],
    );
    assert.ok(SEGMENT_MESSAGES < 2 * size);
    // The message the bound cut (its question unread) is shown from its first message read, under that message's id
    // (as a resumed stream names it); then the newest segment whole: its question, its one assistant message. The
    // history's summary shows nothing.
    const cut = SEGMENT_MESSAGES - size;
    assert.deepEqual(
      page.map((m) => [m.id, m.role, m.role === 'user' ? textOf(m) : m.parts.length]),
      [
        [`${id}-${base - size - cut}`, 'assistant', 2 * cut],
        [`${id}-${base - size + 1}`, 'user', 'Question 4.'],
        [`${id}-${base - size + 2}`, 'assistant', 2 * (size - 2)],
      ],
    );
  });

  it('a session compacted after every turn: the page reads at most 16 segments, however small', async () => {
    const { id, summary } = await compactedOnce();
    // 40 more segments of one turn each (summary, question, answer), as the compaction script writes them.
    await keepSegments(
      id,
      summary,
      Array.from({ length: 40 }, (_, k) => k + 2),
      (k) => [{ role: 'assistant', content: [{ type: 'text', text: `Answer ${k}.` }] }],
    );
    const monitor = await monitorRedis(h.redis.port);
    const page = await reload(id);
    await monitor.settle();
    monitor.stop();
    const reads = monitor.commands.filter((a) => a[1] === `s:{${id}}:c` && a[0]!.toLowerCase() === 'lindex');
    assert.equal(reads.length, 16);
    assert.equal(reads.at(-1)![2], String(40 - 15), 'the newest 16 of indexes 0..40');
    // The 16 newest turns, oldest first.
    const questions = page.filter((m) => m.role === 'user').map(textOf);
    assert.deepEqual(
      questions,
      Array.from({ length: 16 }, (_, k) => `Question ${k + 26}.`),
    );
  });

  it("a kept segment larger than the page's 8 MiB is weighed, not read: the page shows the newer segments that fit", async () => {
    for (const unsized of [false, true]) {
      const { id, summary } = await compactedOnce();
      const r = new Redis(h.redis.url);
      try {
        // The compaction script keeps the segment's byte length beside it.
        const kept = await r.lindexBuffer(`s:{${id}}:c`, 0);
        // The compaction script keeps the segment's byte length beside it, anchored by the segment count.
        assert.match((await r.hget(`s:{${id}}`, 'seg_bytes'))!, new RegExp(`^1 ${kept!.length},\\d+,a$`));
      } finally {
        r.disconnect();
      }
      // Segment 1: one answer of 9 MiB; segment 2, the newest: one small turn.
      const huge = 'x'.repeat(9 * 1024 * 1024);
      await keepSegments(
        id,
        summary,
        [2],
        () => [{ role: 'assistant', content: [{ type: 'text', text: huge }] }],
        unsized ? 'none' : 'kept',
      );
      await keepSegments(
        id,
        summary,
        [3],
        () => [{ role: 'assistant', content: [{ type: 'text', text: 'Answer 3.' }] }],
        unsized ? 'none' : 'kept',
      );
      const { page, asked, weighed, sent } = await reloadWatched(id);
      // The newest segment is read; the one that would take the read past 8 MiB is not sent (nor anything older
      // touched): with its length kept, not even asked for; without, weighed in Redis when its turn came.
      assert.deepEqual(asked, unsized ? ['2', '1'] : ['2'], `unsized: ${unsized}`);
      assert.deepEqual(weighed, unsized ? ['2', '1'] : [], `unsized: ${unsized}`);
      assert.ok(sent < 1024 * 1024, `unsized: ${unsized}: ${sent} bytes sent`);
      assert.deepEqual(
        page.map((m) => [m.role, textOf(m)]),
        [
          ['user', 'Question 3.'],
          ['assistant', 'Answer 3.'],
        ],
      );
    }
  });

  it("a history replaced with PUT …/messages that starts with another session's summary: the page shows this session's segments from before it never, those of compactions since", async () => {
    // `legacy`: the PUT was made by a version that kept no `replaced_base`; the segments tell by their record.
    for (const legacy of [false, true]) {
      const other = await compactedOnce();
      // This session: a turn, compacted (its own segment), then its history replaced with the other's summary first.
      const { id } = await compactedOnce();
      const put = await h.api.req('PUT', `/v1/sessions/${id}/messages`, {
        messages: [
          other.summary,
          { role: 'user', content: [{ type: 'text', text: 'Put question.' }] },
          { role: 'assistant', content: [{ type: 'text', text: 'Put answer.' }] },
        ],
      });
      assert.equal(put.status, 200, JSON.stringify(put.body));
      if (legacy) {
        const r = new Redis(h.redis.url);
        try {
          assert.equal(await r.hdel(`s:{${id}}`, 'replaced_base'), 1);
        } finally {
          r.disconnect();
        }
      }
      const only = [
        ['user', 'Put question.'],
        ['assistant', 'Put answer.'],
      ];
      const watched = await reloadWatched(id);
      const before = watched.page;
      assert.deepEqual(view(before), only, `legacy: ${legacy}`);
      // The segment the PUT replaced is not read, even to be dropped: with the base, the history starts there; without
      // it, the segment's record is kept with its length.
      assert.deepEqual([watched.asked, watched.weighed], [[], []], `legacy: ${legacy}`);
      // The ids go on from the session's whole record (its first segment's two messages).
      assert.deepEqual(
        before.map((m) => m.id),
        [`${id}-3`, `${id}-4`],
      );
      // A compaction since: its segment (the replaced history) is shown, the one before the PUT still not.
      assert.equal((await h.api.post(`/v1/sessions/${id}/compact`)).status, 202);
      await h.api.waitFor(id, (x) => x.status === 'idle' && !x.compaction_pending);
      const rest = (await h.api.get(`/v1/sessions/${id}/messages?include=compacted`)).body;
      assert.equal(rest.compacted.length, 2);
      const since = await reloadWatched(id);
      assert.deepEqual(view(since.page), only, `legacy: ${legacy}, after a compaction`);
      assert.deepEqual(since.asked, ['1'], `legacy: ${legacy}, after a compaction`);
      // Nor when no length is kept (an older version's segments): Redis tells it by its record, nothing of it sent.
      if (legacy) {
        const r = new Redis(h.redis.url);
        try {
          await r.hdel(`s:{${id}}`, 'seg_bytes');
        } finally {
          r.disconnect();
        }
        const unsized = await reloadWatched(id);
        assert.deepEqual(view(unsized.page), only, 'no lengths');
        assert.deepEqual(
          [unsized.asked, unsized.weighed],
          [
            ['1', '0'],
            ['1', '0'],
          ],
          'no lengths',
        );
      }
    }
  });

  it('segments kept with no length (an older version): weighed only when the page is about to read one, never when the history starts with no summary', async () => {
    const { id, summary } = await compactedOnce();
    // Segments 1 (9 MiB) and 2 (small), and segment 0 too, kept with no length, as a version before them wrote.
    const huge = 'x'.repeat(9 * 1024 * 1024);
    await keepSegments(
      id,
      summary,
      [2],
      () => [{ role: 'assistant', content: [{ type: 'text', text: huge }] }],
      'none',
    );
    await keepSegments(
      id,
      summary,
      [3],
      () => [{ role: 'assistant', content: [{ type: 'text', text: 'Answer 3.' }] }],
      'none',
    );
    // The newest is read, the 9 MiB one weighed when its turn comes and not sent; the oldest is never touched.
    const read = await reloadWatched(id);
    assert.deepEqual(read.asked, ['2', '1']);
    assert.deepEqual(read.weighed, ['2', '1']);
    assert.ok(read.sent < 1024 * 1024, `${read.sent} bytes sent`);
    assert.deepEqual(view(read.page), [
      ['user', 'Question 3.'],
      ['assistant', 'Answer 3.'],
    ]);
    // A history that does not start with a summary: no segment is shown, none is touched.
    const put = await h.api.req('PUT', `/v1/sessions/${id}/messages`, {
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Put question.' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Put answer.' }] },
      ],
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const after = await reloadWatched(id);
    assert.deepEqual([after.asked, after.weighed], [[], []]);
    assert.deepEqual(view(after.page), [
      ['user', 'Put question.'],
      ['assistant', 'Put answer.'],
    ]);
  });

  it("a segment an older version's compaction pushed beside newer ones (no entry in seg_bytes), or a seg_bytes not of this version's form: its length is unknown, and it is weighed, never taken for another's", async () => {
    const { id, summary } = await compactedOnce();
    // Segment 1: 9 MiB, pushed by a replica of a version that writes no `seg_bytes` (as it stands: segment 0's entry).
    const huge = 'x'.repeat(9 * 1024 * 1024);
    await keepSegments(
      id,
      summary,
      [2],
      () => [{ role: 'assistant', content: [{ type: 'text', text: huge }] }],
      'untouched',
    );
    // Then a turn, and a compaction by this version: segment 2.
    h.fake.enqueue(text('Third answer.'));
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Third question.' });
    await h.api.waitStatus(id, 'idle');
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`)).status, 202);
    await h.api.waitFor(id, (x) => x.status === 'idle' && !x.compaction_pending);
    const only = [
      ['user', 'Third question.'],
      ['assistant', 'Third answer.'],
    ];
    const r = new Redis(h.redis.url);
    try {
      const written = (await r.hget(`s:{${id}}`, 'seg_bytes'))!;
      // As written, then as versions that wrote it otherwise might leave it: plain lengths (the newest 16, oldest
      // first, segment 0's taken for segment 1's), or not numbers.
      const small = String((await r.lindexBuffer(`s:{${id}}:c`, 0))!.length);
      for (const field of [
        written,
        `${small} ${written.split(/[ ,]/)[1]}`,
        `3 ${small} ${small} ${small}`,
        '3 NaN x,1 ?',
      ]) {
        await r.hset(`s:{${id}}`, 'seg_bytes', field);
        const read = await reloadWatched(id);
        // Segment 2 is read; segment 1 weighed, not sent.
        assert.deepEqual(read.asked.slice(-1), ['1'], field);
        assert.deepEqual(read.weighed.slice(-1), ['1'], field);
        assert.ok(read.sent < 1024 * 1024, `${field}: ${read.sent} bytes sent`);
        assert.deepEqual(view(read.page), only, field);
      }
      // Anchored by the count: segment 0's entry did not end below segment 2, so it was dropped.
      assert.match(written, /^3 \d+,\d+,a$/);
    } finally {
      r.disconnect();
    }
  });

  it('a history replaced again by a PUT of an older version (replaced_at moved, replaced_base left): the base is not trusted, and the page shows no replaced turn', async () => {
    const other = await compactedOnce();
    const { id } = await compactedOnce();
    const put = async (k: number) => {
      const r = await h.api.req('PUT', `/v1/sessions/${id}/messages`, {
        messages: [
          other.summary,
          { role: 'user', content: [{ type: 'text', text: `Put question ${k}.` }] },
          { role: 'assistant', content: [{ type: 'text', text: `Put answer ${k}.` }] },
        ],
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    };
    // A PUT by this version, a compaction (segment 1: that history), then a PUT by an older version: it sets
    // `replaced_at` and leaves `replaced_base` as the first PUT wrote it.
    await put(1);
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`)).status, 202);
    await h.api.waitFor(id, (x) => x.status === 'idle' && !x.compaction_pending);
    const r = new Redis(h.redis.url);
    try {
      const left = await r.hget(`s:{${id}}`, 'replaced_base');
      await put(2);
      await r.hset(`s:{${id}}`, 'replaced_base', left!);
      assert.notEqual(await r.hget(`s:{${id}}`, 'replaced_at'), left!.split(':')[0]);
    } finally {
      r.disconnect();
    }
    // Segment 1 is the history the second PUT replaced: not shown (its record came before that PUT), nor read.
    const read = await reloadWatched(id);
    assert.deepEqual(view(read.page), [
      ['user', 'Put question 2.'],
      ['assistant', 'Put answer 2.'],
    ]);
    assert.deepEqual(read.asked, []);
  });

  it("a segment a PUT replaced names nothing after the PUT's history's summary, however the read ends: at its 4000 messages, or its 16 segments", async () => {
    for (const [legacy, bound] of [
      [false, 'messages'],
      [true, 'messages'],
      [false, 'segments'],
      [true, 'segments'],
    ] as const) {
      const other = await compactedOnce();
      // This session: a turn, compacted (segment 0), then segment 1, which ends with a user turn (`u`, as a
      // compaction at a run's start keeps it); then its history replaced with the other's summary and an answer.
      const { id, summary } = await compactedOnce();
      await keepSegments(id, summary, [2], () => []);
      const put = await h.api.req('PUT', `/v1/sessions/${id}/messages`, {
        messages: [other.summary, { role: 'assistant', content: [{ type: 'text', text: 'Put answer.' }] }],
      });
      assert.equal(put.status, 200, JSON.stringify(put.body));
      const step = (j: number) => ({ role: 'assistant', content: [{ type: 'text', text: ` Step ${j}.` }] });
      // Compactions since (their records after the PUT's): the PUT's history, the answer then going on, in one
      // segment of SEGMENT_MESSAGES messages, or in 16 segments (each but the first a summary and a step). The page
      // reads them all, and its read ends at a bound, right above segment 1.
      const given = [other.summary, { role: 'assistant', content: [{ type: 'text', text: 'Put answer.' }] }];
      const since =
        bound === 'messages'
          ? [
              {
                at_iteration: 3,
                messages: [...given, ...Array.from({ length: SEGMENT_MESSAGES - 2 }, (_, j) => step(j))],
              },
            ]
          : Array.from({ length: SEGMENTS }, (_, k) => ({
              at_iteration: 3 + k,
              messages: k === 0 ? given : [summary, step(k)],
            }));
      const r = new Redis(h.redis.url);
      try {
        assert.match((await r.hget(`s:{${id}}`, 'seg_bytes'))!, / \d+,2,u$/);
        if (legacy) assert.equal(await r.hdel(`s:{${id}}`, 'replaced_base'), 1);
        await pushSegments(id, since);
        // Segment 1's entry is kept (the one below the 16 newest).
        assert.match((await r.hget(`s:{${id}}`, 'seg_bytes'))!, / \d+,2,u /);
        await r.del(`s:{${id}}:m`);
        await r.rpush(`s:{${id}}:m`, JSON.stringify(summary));
      } finally {
        r.disconnect();
      }
      // The answer is named by its own index (after segments 0 and 1, 4 messages, and the PUT's summary), as when the
      // read ends at the PUT: the summary before it is the PUT's history's, which follows no question of segment 1's.
      const page = await reload(id);
      const read = since.reduce((n, x) => n + x.messages.length, 0);
      assert.deepEqual(
        page.map((m) => [m.id, m.role, m.parts.length]),
        [[`${id}-5`, 'assistant', 2 * (read - (bound === 'messages' ? 1 : SEGMENTS))]],
        `legacy: ${legacy}, ${bound}`,
      );
    }
  });
});
