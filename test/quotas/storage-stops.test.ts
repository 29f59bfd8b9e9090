/**
 * A tenant at TENANT_MAX_BYTES can always stop spending and free storage: a cancel (REST with a key, the WebSocket
 * `cancel` frame, a client token of scope `cancel`; a run with a live owner and a session waiting for its client), a
 * call's denial (REST, the `tool_call.decide` frame, a chat's approval response), a token's revoke, a schedule's
 * pause and delete, a webhook's pause and delete, a tool's and a session's delete all succeed, their bytes counted;
 * writes that add content (a message, an approval, a schedule's PATCH that grows its body, a mint) stay refused
 * with 429 `quota_exceeded` `storage_bytes`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import { hang, reply, text, toolUse } from '../fake/script.js';
import { startHarness, type Api, type ApiResponse, type Harness } from '../helpers/service.js';
import { connectWs, type WsClient } from '../fixtures/event-clients.js';
import { PlainChat, chatTransport } from '../helpers/chat.js';
import { storageKey } from '../../src/store/storage-quota.js';
import { taskKeys } from '../../src/tenant-tools/keys.js';

const KEY = 'key-acme';
/** Small, so that a few sessions fill it. */
const MAX = 200_000;

const refusedForStorage = (res: ApiResponse, what: string) => {
  assert.equal(res.status, 429, `${what}: ${JSON.stringify(res.body).slice(0, 300)}`);
  assert.deepEqual(res.body.error.details, { quota: 'storage_bytes', limit: MAX }, what);
};

const ok = (res: ApiResponse, what: string) =>
  assert.ok(res.status === 200 || res.status === 202, `${what}: ${res.status} ${JSON.stringify(res.body)}`);

describe('TENANT_MAX_BYTES: stops and deletes at the limit', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  const sockets: WsClient[] = [];
  before(async () => {
    h = await startHarness({
      env: { API_KEYS: `acme:${KEY}`, TENANT_MAX_BYTES: String(MAX), WEBHOOK_ALLOW_PRIVATE: 'true' },
    });
    a = h.api;
    r = new Redis(h.redis.url);
  });
  after(async () => {
    for (const c of sockets) c.close();
    r.disconnect();
    await h?.close();
  });

  const used = async () =>
    Number((await r.get(storageKey('acme'))) ?? 0) + Number((await r.get(taskKeys('acme').bytes)) ?? 0);

  /** A session whose run waits in the model's request (a live owner holds it). */
  async function running(requests: number): Promise<string> {
    h.fake.enqueue(hang());
    const made = await a.post('/v1/sessions', { input: 'Wait.' });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    await h.fake.waitForRequests(requests);
    return made.body.id as string;
  }

  /** A session waiting for decisions on `ids` (get_weather calls under `approval`). */
  async function awaitingApproval(ids: string[]): Promise<string> {
    h.fake.enqueue(reply(ids.map((id, i) => toolUse('get_weather', { location: `City ${i}` }, id))));
    const made = await a.post('/v1/sessions', {
      input: 'The weather?',
      tools: ['get_weather'],
      approval: ['get_weather'],
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    await a.waitStatus(made.body.id, 'requires_action');
    return made.body.id as string;
  }

  it('a cancel, a denial, a revoke, a pause and the deletes pass; a message, an approval, a growing PATCH are 429', async () => {
    // Below the limit: what the tenant will want to stop or free.
    const live = await running(1);
    const liveForToken = await running(2);
    const waiting = await awaitingApproval(['toolu_wait']);
    const deciding = await awaitingApproval(['toolu_d1', 'toolu_d2']);
    const chatted = (
      await a.post('/v1/sessions', { start: false, tools: ['get_weather'], approval: ['get_weather'] })
    ).body.id as string;
    let chatFailed!: (err: Error) => void;
    const chatError = new Promise<never>((_, reject) => (chatFailed = reject));
    const chat = new PlainChat({
      id: chatted,
      transport: chatTransport(h.service.url, KEY),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
      onError: (err) => chatFailed(err),
    });
    h.fake.enqueue(reply([toolUse('get_weather', { location: 'Paris' }, 'toolu_chat')]));
    await chat.sendMessage({ text: 'The weather in Paris?' });
    await a.waitStatus(chatted, 'requires_action');
    const idle = (await a.post('/v1/sessions', { input: 'Hello.', start: false })).body.id as string;
    const canceller = await a.post('/v1/client-tokens', { session_id: liveForToken, scopes: ['cancel'] });
    assert.equal(canceller.status, 201, JSON.stringify(canceller.body));
    const reader = await a.post('/v1/client-tokens', { session_id: idle, scopes: ['read'] });
    assert.equal(reader.status, 201, JSON.stringify(reader.body));
    const sched = await a.post('/v1/schedules', { cron: '0 3 * * *', session: { input: 'Nightly.' } });
    assert.equal(sched.status, 201, JSON.stringify(sched.body));
    const tool = await a.req('PUT', '/v1/tools/ship_order', {
      description: 'Ship an order.',
      input_schema: { type: 'object', properties: { order: { type: 'number' } } },
      runner: { type: 'worker' },
    });
    assert.equal(tool.status, 201, JSON.stringify(tool.body));
    const hook = await a.post('/v1/webhooks', { url: 'http://127.0.0.1:9/h', events: ['session.deleted'] });
    assert.equal(hook.status, 201, JSON.stringify(hook.body));
    const ws = await connectWs(h.service.url, waiting, { token: KEY });
    sockets.push(ws);
    const wsDecide = await connectWs(h.service.url, deciding, { token: KEY });
    sockets.push(wsDecide);

    // Filled to the limit: sessions of 20 kB until one is refused, then the few bytes left (less than one more such
    // session) taken too, so that any write that adds a byte finds the tenant at its limit.
    for (let i = 0; ; i++) {
      const filler = await a.post('/v1/sessions', { input: 'x', system: 'z'.repeat(20_000), start: false });
      if (filler.status === 429) break;
      assert.equal(filler.status, 201, JSON.stringify(filler.body).slice(0, 300));
      assert.ok(i < 20, 'the limit was reached');
    }
    const left = MAX - (await used());
    assert.ok(left >= 0 && left < 25_000, `${left} bytes left`);
    await r.incrby(storageKey('acme'), left);
    const full = await used();
    assert.ok(full >= MAX, `${full} bytes used`);

    // Writes that add content: refused.
    refusedForStorage(await a.post(`/v1/sessions/${idle}/messages`, { text: 'One more.' }), 'a message');
    refusedForStorage(
      await a.post(`/v1/sessions/${deciding}/tool-calls/toolu_d1`, { decision: 'approve' }),
      'an approval',
    );
    refusedForStorage(
      await a.req('PATCH', `/v1/schedules/${sched.body.id}`, { session: { input: 'y'.repeat(5000) } }),
      "a schedule's PATCH that grows its body",
    );
    refusedForStorage(await a.post('/v1/client-tokens', { session_id: idle, scopes: ['read'] }), 'a mint');

    // A cancel of a run with a live owner (REST, a key): the cancel request and the owner's commit.
    ok(await a.post(`/v1/sessions/${live}/cancel`), 'a cancel over REST');
    // A client token's cancel (scope `cancel` alone).
    ok(await a.as(canceller.body.token).post(`/v1/sessions/${liveForToken}/cancel`), "a token's cancel");
    for (const id of [live, liveForToken]) {
      const done = await a.waitStatus(id, ['idle', 'failed']);
      assert.equal(done.stop_reason, 'cancelled', JSON.stringify(done.error));
    }
    // The WebSocket `cancel` frame, of a session waiting for its client (committed by the request).
    const cancelled = await ws.request({ type: 'cancel', ref: 'c' });
    assert.equal(cancelled.type, 'ack', JSON.stringify(cancelled));
    assert.equal(cancelled.status, 'idle');
    assert.equal((await a.get(`/v1/sessions/${waiting}`)).body.stop_reason, 'cancelled');

    // Denials: REST, then the frame; the last decision lets the run go on (as below the limit).
    const denied = await a.post(`/v1/sessions/${deciding}/tool-calls/toolu_d2`, {
      decision: 'deny',
      reason: 'no',
    });
    ok(denied, 'a denial over REST');
    assert.equal(denied.body.status, 'requires_action');
    h.fake.enqueue(text('I will not look.'));
    const deniedFrame = await wsDecide.request({
      type: 'tool_call.decide',
      ref: 'd',
      tool_use_id: 'toolu_d1',
      decision: 'deny',
    });
    assert.equal(deniedFrame.type, 'ack', JSON.stringify(deniedFrame));
    assert.equal((await a.waitStatus(deciding, ['idle', 'failed'])).stop_reason, 'end_turn');
    // A chat's approval response `approved: false`.
    h.fake.enqueue(text('Fine, not Paris.'));
    const answered = chat.nextFinish();
    await chat.addToolApprovalResponse({ id: 'toolu_chat', approved: false, reason: 'not now' });
    await Promise.race([answered, chatError]);
    assert.equal((await a.waitStatus(chatted, ['idle', 'failed'])).stop_reason, 'end_turn');

    // A token's revoke.
    ok(await a.req('DELETE', `/v1/client-tokens/${reader.body.id}`), 'a revoke');
    // A schedule's pause, then its delete.
    const paused = await a.req('PATCH', `/v1/schedules/${sched.body.id}`, { paused: true });
    ok(paused, "a schedule's pause");
    assert.equal(paused.body.paused, true);
    ok(await a.req('DELETE', `/v1/schedules/${sched.body.id}`), "a schedule's delete");
    // A webhook's pause, then its delete; a tool's delete; a session's delete.
    ok(await a.req('PATCH', `/v1/webhooks/${hook.body.id}`, { disabled: true }), "a webhook's pause");
    ok(await a.req('DELETE', `/v1/webhooks/${hook.body.id}`), "a webhook's delete");
    ok(await a.req('DELETE', '/v1/tools/ship_order'), "a tool's delete");
    // What the stops wrote is counted (the runs the denials let go on too): the tenant is past its limit, and a
    // message is still refused.
    assert.ok((await used()) > full, 'the stops are counted');
    refusedForStorage(await a.post(`/v1/sessions/${live}/messages`, { text: 'Again.' }), 'a message after');
    // A session's delete.
    ok(await a.req('DELETE', `/v1/sessions/${idle}`), "a session's delete");
  });
});
