/**
 * A `regenerate-message` with an Idempotency-Key sent again after its answer was lost, its stream record gone too (it
 * expired, or the first request's process died between its write and that record): the session remembers the key
 * (its applied tokens), so nothing is cut twice — and the answer is the regenerated one, streamed from where the
 * first answer did, not an empty stream from now (src/chat/post.ts `regenerate`).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { DefaultChatTransport, type UIMessage } from 'ai';
import { text } from '../fake/script.js';
import { PlainChat, chatTransport, readAll } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'regen-replay-key';
const textOf = (m: UIMessage | undefined) =>
  (m?.parts ?? []).flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');

describe('chat regenerate sent again after its records were lost', { timeout: 120_000 }, () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  it('the same Idempotency-Key again: the regenerated answer streams again, nothing is cut twice', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id;
    const chat = new PlainChat({ id, transport: chatTransport(h.service.url, KEY) });
    h.fake.enqueue(text('First answer.'));
    const first = chat.nextFinish();
    await chat.sendMessage({ text: 'one' });
    await first;
    const [question, answer] = chat.messages;
    assert.ok(question && answer);

    const keyed = new DefaultChatTransport({
      api: `${h.service.url}/v1/chat`,
      headers: { authorization: `Bearer ${KEY}`, 'idempotency-key': 'regen-once' },
    });
    const regenerate = () =>
      keyed.sendMessages({
        chatId: id,
        messages: [question],
        trigger: 'regenerate-message',
        messageId: answer.id,
        abortSignal: undefined,
      });
    h.fake.enqueue(text('Second answer.'));
    const made = await readAll(await regenerate());
    assert.equal(textOf(made.message), 'Second answer.');
    await h.api.waitStatus(id, 'idle');
    const requests = h.fake.requests.length;

    // The answer's record is lost: the key's stream record is gone, the session's applied token stays.
    const records = (await r.keys('idem:{acme}:*')).filter((k) => !k.includes('~'));
    assert.ok(records.length > 0);
    await r.del(...records);
    const again = await readAll(await regenerate());
    assert.equal(textOf(again.message), 'Second answer.', JSON.stringify(again.chunks));
    const start = again.chunks[0];
    assert.equal(
      start?.type === 'start' && start.messageId,
      made.chunks[0]?.type === 'start' && made.chunks[0].messageId,
    );
    const end = again.chunks.at(-1);
    assert.equal(end?.type === 'finish' && end.finishReason, 'stop');
    assert.equal(h.fake.requests.length, requests, 'no run again');
    const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.equal(history.length, 2);
    assert.equal(history[1].content[0].text, 'Second answer.');
  });
});
