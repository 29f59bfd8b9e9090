/**
 * run-start-2.lua's count of the history messages before a retry's run (src/chat/run-start.ts `kept`), on a log and a
 * history written by hand: the moment before that run's first `turn.started`, which a session driven through the
 * service passes too quickly to reload in (test/chat/chat.test.ts reloads after it).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { defineChatCommands, runStartCursor } from '../../src/chat/run-start.js';
import { sessionKeys } from '../../src/store/keys.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';

describe('chat run start: the history kept before a retry', () => {
  let redis: TestRedis;
  let r: Redis;
  before(async () => {
    redis = await startTestRedis();
    r = new Redis(redis.url);
    defineChatCommands(r);
  });
  after(async () => {
    r?.disconnect();
    await redis?.stop();
  });

  const log = (id: string, t: string, d: unknown) =>
    r.xadd(sessionKeys(id).events, '*', 't', t, 'd', JSON.stringify(d));
  const push = (id: string, n: number) =>
    r.rpush(sessionKeys(id).msgs, ...Array.from({ length: n }, () => '{"role":"assistant","content":[]}'));

  test("before the retry's first turn, the history as it stands; after it, what that turn was sent with", async () => {
    const id = 'ses_runstartkept1';
    // A question, two steps (reply and results each), a failed third request; the retry trims the second step.
    await log(id, 'session.status', { status: 'running' });
    await log(id, 'message.appended', { role: 'user', content: [{ type: 'text', text: 'weather?' }] });
    for (const [i, count] of [1, 3, 5].entries())
      await log(id, 'turn.started', { iteration: i + 1, message_count: count });
    await log(id, 'session.status', { status: 'failed' });
    await log(id, 'turn.dropped', { iteration: 2, reason: 'retry' });
    const retried = await log(id, 'session.status', { status: 'running' });
    await push(id, 3);
    const start = await runStartCursor(r, id, 1000, false);
    assert.equal(start?.run, retried);
    assert.equal(start?.kept, 3);
    // The retry's turn starts, and its reply is in the history: the count is the turn's.
    await log(id, 'turn.started', { iteration: 2, message_count: 3 });
    await push(id, 2);
    assert.equal((await runStartCursor(r, id, 1000, false))?.kept, 3);
  });

  test('a retry from a pause (requires_action): the replay starts at its run, the history kept before it', async () => {
    const id = 'ses_runstartkept3';
    // A question, a step that paused for a client's call; the retry drops that step from the pause.
    await log(id, 'session.status', { status: 'running' });
    await log(id, 'message.appended', { role: 'user', content: [{ type: 'text', text: 'weather?' }] });
    await log(id, 'turn.started', { iteration: 1, message_count: 1 });
    await log(id, 'session.status', { status: 'requires_action' });
    await log(id, 'turn.dropped', { iteration: 1, reason: 'retry' });
    const retried = await log(id, 'session.status', { status: 'running' });
    await push(id, 1);
    const start = await runStartCursor(r, id, 1000, false);
    assert.equal(start?.run, retried);
    assert.equal(start?.kept, 1, 'the dropped step is not replayed from the log');
  });

  test("a compaction in the retry's run: no count (its positions moved), nothing seeded (found by a review)", async () => {
    const id = 'ses_runstartkept4';
    await log(id, 'session.status', { status: 'running' });
    await log(id, 'message.appended', { role: 'user', content: [{ type: 'text', text: 'weather?' }] });
    for (const [i, count] of [1, 3].entries())
      await log(id, 'turn.started', { iteration: i + 1, message_count: count });
    await log(id, 'session.status', { status: 'failed' });
    await log(id, 'turn.dropped', { iteration: 2, reason: 'retry' });
    const retried = await log(id, 'session.status', { status: 'running' });
    await log(id, 'turn.started', { iteration: 2, message_count: 3 });
    await log(id, 'compaction.completed', { iteration: 3 });
    await push(id, 3);
    const start = await runStartCursor(r, id, 1000, false);
    assert.equal(start?.run, retried);
    assert.equal(start?.kept, undefined);
  });

  test('no retry: the whole message is replayed, nothing kept', async () => {
    const id = 'ses_runstartkept2';
    await log(id, 'session.status', { status: 'running' });
    await log(id, 'message.appended', { role: 'user', content: [{ type: 'text', text: 'weather?' }] });
    await log(id, 'turn.started', { iteration: 1, message_count: 1 });
    await push(id, 1);
    assert.equal((await runStartCursor(r, id, 1000, false))?.kept, undefined);
  });
});
