import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { assertSnapshotsEqual, snapshotRedis, untilRunsOver } from '../helpers/redis-snapshot.js';
import { spawnService, type ServiceProcess as ChildService } from '../helpers/process.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { hang, text, toolCall, toolCalls, toolUse } from '../fake/script.js';

/** Everything the API shows about a session: the resource, its history and every iteration record. */
async function view(api: Api, id: string) {
  const session = await api.get(`/v1/sessions/${id}`);
  const messages = await api.get(`/v1/sessions/${id}/messages`);
  const iterations = await api.get(`/v1/sessions/${id}/iterations`);
  assert.equal(session.status, 200);
  const records = [];
  for (let n = 1; n <= session.body.iteration; n++) {
    const r = await api.get(`/v1/sessions/${id}/iterations/${n}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    records.push(r.body);
  }
  return { session: session.body, messages: messages.body, iterations: iterations.body, records };
}

describe('sessions survive a service restart', () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  const open: Harness[] = [];
  const children: ChildService[] = [];

  before(async () => {
    redis = await startTestRedis();
    fake = await startFakeAnthropic({ strictAlternation: true });
  });
  after(async () => {
    for (const c of children) await c.kill();
    for (const h of open) await h.close().catch(() => {});
    await fake.close();
    await redis.stop();
  });
  beforeEach(() => fake.reset());

  const harness = async (env: Record<string, string> = {}) => {
    const h = await startHarness({ redis, fakeServer: fake, env });
    open.push(h);
    return h;
  };
  const closeHarness = async (h: Harness) => {
    await h.close();
    open.splice(open.indexOf(h), 1);
  };

  it('a finished session is identical after close + start on the same Redis, and a follow-up runs', async () => {
    const h1 = await harness();
    fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 2 }),
      toolCalls([toolUse('get_weather', { location: 'Oslo' }), toolUse('calculate_sum', { a: 5, b: 6 })]),
      text('First run done.', { usage: { cache_read_input_tokens: 11, cache_creation_input_tokens: 4 } }),
    );
    const created = await h1.api.post('/v1/sessions', {
      input: 'Start',
      tools: ['calculate_sum', 'get_weather'],
      metadata: { k: 'v' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    const done = await h1.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.iteration, 3);
    const beforeView = await view(h1.api, id);
    // Closed once its runs are over, with nothing left for the next service's sweeps to clean up (runsOver).
    await untilRunsOver(redis.url, h1.service.app.engine);
    await closeHarness(h1);
    const beforeRedis = await snapshotRedis(redis.url);

    const h2 = await harness();
    const afterView = await view(h2.api, id);
    assert.deepEqual(afterView, beforeView, 'the restarted service shows the same session, history, records');
    assertSnapshotsEqual(
      beforeRedis,
      await snapshotRedis(redis.url, h2.service.app.engine),
      'starting a service on a quiet Redis',
    );

    fake.enqueue(text('Second run done.'));
    const sent = await h2.api.post(`/v1/sessions/${id}/messages`, { text: 'And again' });
    assert.ok([200, 202].includes(sent.status), JSON.stringify(sent.body));
    const done2 = await h2.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done2.status, 'idle', JSON.stringify(done2.error));
    assert.equal(done2.stop_reason, 'end_turn');
    assert.equal(done2.iteration, 4);
    assert.equal(fake.requests.length, 4);
    // the model got the whole pre-restart history, then the new user turn
    assert.deepEqual(fake.requests[3]!.messages, [
      ...beforeView.messages.data,
      { role: 'user', content: [{ type: 'text', text: 'And again' }] },
    ]);
    const after2 = await view(h2.api, id);
    assert.deepEqual(after2.iterations.data.slice(0, 3), beforeView.iterations.data);
    const sum = (k: string) => after2.iterations.data.reduce((a: number, r: any) => a + r.usage[k], 0);
    for (const k of [
      'input_tokens',
      'output_tokens',
      'cache_creation_input_tokens',
      'cache_read_input_tokens',
    ])
      assert.equal(done2.usage[k], sum(k), `usage.${k} total`);
  });

  it('a session waiting for a client tool result survives a restart; the result submitted afterwards runs it', async () => {
    const h1 = await harness();
    fake.enqueue(toolCall('lookup', { q: 'x' }, { id: 'toolu_restart_lookup' }), text('Thanks.'));
    const created = await h1.api.post('/v1/sessions', {
      input: 'Look it up',
      tools: [{ name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    const waiting = await h1.api.waitStatus(id, ['requires_action', 'failed', 'idle']);
    assert.equal(waiting.status, 'requires_action');
    await closeHarness(h1);

    const h2 = await harness();
    const same = await h2.api.get(`/v1/sessions/${id}`);
    assert.deepEqual(same.body, waiting);
    const put = await h2.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_restart_lookup`, {
      content: 'found it',
    });
    assert.ok([200, 202].includes(put.status), JSON.stringify(put.body));
    const done = await h2.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.deepEqual(fake.requests[1]!.messages.at(-1), {
      role: 'user',
      content: [{ type: 'tool_result', tool_use_id: 'toolu_restart_lookup', content: 'found it' }],
    });
  });

  it('a service closed mid-turn hands the run over: another service finishes it', async () => {
    const h1 = await harness({ SHUTDOWN_GRACE_MS: '300' });
    fake.enqueue(toolCall('calculate_sum', { a: 2, b: 2 }), hang(), text('Finished elsewhere.'));
    const created = await h1.api.post('/v1/sessions', { input: 'Go', tools: ['calculate_sum'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    await fake.waitForRequests(2); // turn 2 hangs in h1
    await closeHarness(h1);
    const h2 = await harness();
    const done = await h2.api.waitStatus(id, ['idle', 'failed'], 10_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.iteration, 2);
    assert.equal(fake.requests.length, 3);
    assert.deepEqual(fake.requests[2]!.messages, fake.requests[1]!.messages, 'turn 2 sent again');
    const msgs = (await h2.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.deepEqual(
      msgs.map((m: any) => m.role),
      ['user', 'assistant', 'user', 'assistant'],
    );
  });

  it('a service process SIGKILLed mid-turn: a new process resumes the session within the lease TTL', async (t) => {
    const LEASE = 2000;
    const env = {
      REDIS_URL: redis.url,
      ANTHROPIC_API_KEY: 'test-key',
      ANTHROPIC_BASE_URL: fake.url,
      LEASE_TTL_MS: String(LEASE),
      UPSTREAM_MAX_RETRIES: '0',
    };
    const first = await spawnService(env);
    children.push(first);
    fake.enqueue(
      toolCall('calculate_sum', { a: 40, b: 2 }, { id: 'toolu_crash_sum' }),
      hang(),
      text('Recovered.'),
    );
    const api1 = new Api(first.url);
    const created = await api1.post('/v1/sessions', { input: 'Crash me', tools: ['calculate_sum'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    await fake.waitForRequests(2, 10_000); // turn 1 persisted with its result, turn 2 in flight (hangs)
    const mid = await api1.get(`/v1/sessions/${id}`);
    assert.equal(mid.body.status, 'running');
    assert.equal(mid.body.iteration, 1);
    await first.kill();
    const killedAt = Date.now();

    const second = await spawnService(env);
    children.push(second);
    const readyAt = Date.now();
    const api2 = new Api(second.url);
    const done = await api2.waitStatus(id, ['idle', 'failed'], LEASE + 20_000);
    // The dead owner's lease expires at most LEASE after the kill; the new process claims the run at its next sweep
    // (~1 s) once both that and its own start have happened. Its boot time is not the lease's doing.
    const late = Date.now() - Math.max(killedAt + LEASE, readyAt);
    t.diagnostic(
      `booted ${readyAt - killedAt} ms after the kill; idle ${late} ms after max(lease expiry, boot)`,
    );
    assert.equal(done.status, 'idle', JSON.stringify(done.error) + JSON.stringify(second.logs().slice(-20)));
    assert.ok(late < 3000, `resumed ${late} ms after the lease expired and the new process was up`);
    assert.equal(done.stop_reason, 'end_turn');
    assert.equal(done.iteration, 2);
    assert.equal(fake.requests.length, 3, 'turn 2 is sent again once, turn 1 is not');
    assert.deepEqual(fake.requests[2]!.messages, fake.requests[1]!.messages);
    const msgs = (await api2.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.deepEqual(msgs.slice(0, -1), fake.requests[2]!.messages);
    assert.deepEqual(msgs[2], {
      role: 'user',
      content: [{ type: 'tool_result', tool_use_id: 'toolu_crash_sum', content: '42' }],
    });
    assert.equal(msgs.at(-1).content[0].text, 'Recovered.');
    const iters = (await api2.get(`/v1/sessions/${id}/iterations`)).body.data;
    assert.deepEqual(
      iters.map((r: any) => r.iteration),
      [1, 2],
    );
  });
});
