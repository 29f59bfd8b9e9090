/**
 * An upstream that fails at once, its stream's error event right after its first events: what the service received
 * before the error is in the log, before the failure (a turn without its reply has no commit to carry what the
 * stream relay still held: src/engine/turn-runner.ts sends it as live news), and the chat answer, read by the `ai`
 * package's transport, shows it and takes it back (`reset-step`) before its `error` and `finish`. Without that, the
 * events the relay had not flushed yet were lost, so whether a client saw the turn begin depended on the timing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { UIMessage } from 'ai';
import { text } from '../fake/script.js';
import { chatTransport, readAll } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'chat-upstream-error-key';

describe('chat answer of an upstream that fails at once', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  const user = (t: string): UIMessage => ({ id: `u-${t}`, role: 'user', parts: [{ type: 'text', text: t }] });

  // A few sessions: each is one timing of the error against the relay's flush.
  for (const n of [1, 2, 3])
    it(`an error event after the first stream events (session ${n}): logged, shown, taken back, then the error`, async () => {
      const id = (await h.api.post('/v1/sessions', { start: false })).body.id;
      h.fake.enqueue(text('hello there you', { streamErrorAfterEvents: 4 }));
      const stream = await chatTransport(h.service.url, KEY).sendMessages({
        chatId: id,
        messages: [user('hi')],
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: undefined,
      });
      const { chunks, message } = await readAll(stream);
      const types = chunks.map((c) => c.type);
      assert.deepEqual(types.slice(0, 3), ['start', 'start-step', 'text-start'], JSON.stringify(types));
      assert.deepEqual(
        types.slice(-5),
        ['reset-step', 'data-turn-dropped', 'error', 'finish-step', 'finish'],
        JSON.stringify(types),
      );
      const err = chunks.at(-3);
      assert.match(err?.type === 'error' ? err.errorText : '', /^upstream_overloaded: /);
      const end = chunks.at(-1);
      assert.equal(end?.type === 'finish' && end.finishReason, 'error');
      assert.deepEqual(
        message?.parts.map((p) => p.type),
        ['step-start'],
        'the failed turn is taken back',
      );

      assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'failed');
      const log: Array<{ type: string; data: { event?: { type: string } } }> = (
        await h.api.get(`/v1/sessions/${id}/events`)
      ).body.data;
      const from = log.findIndex((e) => e.type === 'turn.started');
      const streamed = log.slice(
        from + 1,
        log.findIndex((e) => e.type === 'session.error'),
      );
      assert.deepEqual(
        streamed.slice(0, 2).map((e) => e.type === 'stream.event' && e.data.event?.type),
        ['message_start', 'content_block_start'],
        JSON.stringify(log.map((e) => e.type)),
      );
    });
});
