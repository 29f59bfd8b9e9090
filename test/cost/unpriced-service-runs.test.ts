/**
 * Runs the service starts on its own, without a route's price check (spec §7.4: no dollar ceiling can pass for a
 * model without a price): a review turn's action deadline, and a sub-agent's answer to its parent's call. A session
 * of a model without a price, made before the tenant's cap was set (a replica without it), sends no turn under the
 * cap from either: the engine checks the price before its model request and fails the run with
 * `unknown_model_price`. Every wait is for a state, never a sleep.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { FakeRequest } from '../../src/offline/wire.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { text, toolCall } from '../fake/script.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { until } from '../durability/chaos-lib.js';
import { agentTool, writerWithResearcher } from '../helpers/agents.js';

/** The cap set since the sessions were made; far above what these turns cost. */
const capped = { TENANT_MAX_COST_USD_PER_DAY: '1' };
/** Test-only floor of `action_timeout_s` (the contract's is 10 s), and fast sweeps. */
const fast = { ACTION_TIMEOUT_MIN_S: '1', DEADLINE_SWEEP_MS: '50', AGENT_SWEEP_MS: '50' };

/** The effective `system` (a thread's continuation carries none of its own). */
const systemOf = (req: FakeRequest) => JSON.stringify(req.system ?? '');

async function eventsOf(api: Api, id: string): Promise<Array<{ type: string; data: any }>> {
  return (await api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
}

/** The session failed for the price, in its `error` and in the events that end its run. */
async function assertFailedForPrice(api: Api, id: string) {
  const done = await api.waitStatus(id, ['idle', 'failed'], 30_000);
  assert.equal(done.status, 'failed', JSON.stringify(done));
  assert.equal(done.error?.code, 'unknown_model_price');
  assert.equal(done.error.retryable, false);
  const events = await eventsOf(api, id);
  assert.equal(events.filter((e) => e.type === 'session.error').at(-1)?.data.code, 'unknown_model_price');
  const status = events.filter((e) => e.type === 'session.status').at(-1)?.data;
  assert.deepEqual([status?.status, status?.error?.code], ['failed', 'unknown_model_price']);
  return done;
}

describe(
  'cost: a run the service starts itself, of a model without a price, under a cap set since',
  {
    timeout: 120_000,
  },
  () => {
    let redis: TestRedis;
    let fake: FakeAnthropic;
    const open: Harness[] = [];
    /** A replica on the shared Redis and fake upstream. */
    const replica = async (env: Record<string, string>) => {
      const h = await startHarness({ redis, fakeServer: fake, env });
      open.push(h);
      return h;
    };
    const close = async (h: Harness) => {
      open.splice(open.indexOf(h), 1);
      await h.close();
    };

    before(async () => {
      [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    });
    after(async () => {
      for (const h of open) await h.close();
      await fake.close();
      await redis.stop();
    });

    /**
     * A session of a model without a price, made on a replica without the cap and waiting for the review of a
     * reply that calls `calculate_sum`; then that replica gone and one with the cap up, whose deadline sweep times
     * the review out (the first one's never comes).
     */
    async function reviewedThenCapped(extra: Record<string, unknown> = {}) {
      fake.reset();
      fake.enqueue(toolCall('calculate_sum', { a: 1, b: 2 }, { id: 'toolu_sum' }), text('Never sent.'));
      const before = await replica({ ...fast, DEADLINE_SWEEP_MS: '3600000' });
      const made = await before.api.post('/v1/sessions', {
        model: 'claude-fake-1',
        input: 'Add 1 and 2.',
        tools: ['calculate_sum'],
        pause_after_turn: true,
        action_timeout_s: 1,
        ...extra,
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const id: string = made.body.id;
      const waiting = await before.api.waitStatus(id, 'requires_action', 20_000);
      assert.equal(waiting.required_action.type, 'review_turn');
      await close(before);
      return { id, after: await replica({ ...fast, ...capped }) };
    }

    it("a review turn's deadline accepts the reply and runs its calls, and sends no turn", async () => {
      const { id, after } = await reviewedThenCapped();
      await assertFailedForPrice(after.api, id);
      assert.ok((await eventsOf(after.api, id)).some((e) => e.type === 'action.timed_out'));
      // The reviewed reply's call ran and its result is in the history; the turn after it was not sent.
      const last = (await after.api.get(`/v1/sessions/${id}/messages`)).body.data.at(-1);
      assert.equal(last.content[0].tool_use_id, 'toolu_sum');
      assert.equal(fake.requests.length, 1, 'only the reviewed turn');
      await close(after);
    });

    it("a review turn's deadline at max_iterations runs the calls and stops idle as it would (it sends nothing; found by a review)", async () => {
      const { id, after } = await reviewedThenCapped({ max_iterations: 1 });
      const done = await after.api.waitStatus(id, ['idle', 'failed'], 30_000);
      assert.equal(fake.requests.length, 1, 'nothing sent after the reviewed turn');
      const last = (await after.api.get(`/v1/sessions/${id}/messages`)).body.data.at(-1);
      assert.equal(last.content[0].tool_use_id, 'toolu_sum');
      assert.deepEqual(
        [done.status, done.stop_reason, done.error?.code ?? null],
        ['idle', 'max_iterations', null],
      );
      await close(after);
    });

    it("a sub-agent's answer lands in its parent's call, and the parent sends no turn", async () => {
      fake.reset();
      fake.setHandler((req) => {
        const last = req.messages.at(-1);
        const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
        if (systemOf(req).includes('researcher'))
          return answered ? text('Findings.') : toolCall('lookup', {});
        return answered ? text('Never sent.') : toolCall('researcher', { prompt: 'Why?' });
      });
      const lookup = { name: 'lookup', description: 'a client tool', input_schema: { type: 'object' } };
      const before = await replica(fast);
      // The writer's model has no price; its researcher's has one (so its own result is accepted under the cap).
      const researcher = { model: 'claude-sonnet-5-5', system: 'You are a researcher.', tools: [lookup] };
      const made = await before.api.post('/v1/sessions', {
        ...writerWithResearcher,
        model: 'claude-fake-1',
        tools: [agentTool('researcher', researcher)],
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const id = made.body.id;
      const child = await until(
        async () => (await before.api.get(`/v1/sessions/${id}/children`)).body.data[0],
        20_000,
        'the child',
      );
      // The child waits for its client: the parent is parked on it.
      const parked = await before.api.waitStatus(child.id, 'requires_action', 20_000);
      await close(before);

      const after = await replica({ ...fast, ...capped });
      const sent = await after.api.post(`/v1/sessions/${child.id}/tool-results`, {
        results: [{ tool_use_id: parked.required_action.tool_calls[0].id, content: 'found' }],
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      assert.equal((await after.api.waitStatus(child.id, ['idle', 'failed'], 20_000)).status, 'idle');
      await assertFailedForPrice(after.api, id);
      const last = (await after.api.get(`/v1/sessions/${id}/messages`)).body.data.at(-1);
      assert.match(JSON.stringify(last.content), /Findings\./);
      const writerTurns = fake.requests.filter((r) => systemOf(r).includes('writer'));
      assert.equal(writerTurns.length, 1, "only the writer's first turn");
      await close(after);
    });

    it('a model without a price set by a replica without the cap, while a run is under way, gets no turn', async () => {
      fake.reset();
      fake.enqueue(toolCall('calculate_sum', { a: 1, b: 2 }, { pauseAfterEvents: 2 }), text('Never sent.'));
      const running = await replica({ ...fast, ...capped });
      const uncapped = await replica(fast);
      const made = await running.api.post('/v1/sessions', {
        model: 'claude-sonnet-5-5',
        input: 'Add 1 and 2.',
        tools: ['calculate_sum'],
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const id = made.body.id;
      // Mid-turn: the runner takes the new model up before its next request.
      await fake.waitForRequests(1);
      const patched = await uncapped.api.req('PATCH', `/v1/sessions/${id}`, {
        params: { model: 'claude-fake-1' },
      });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      fake.resume();
      await assertFailedForPrice(running.api, id);
      const last = (await running.api.get(`/v1/sessions/${id}/messages`)).body.data.at(-1);
      assert.equal(last.content[0].type, 'tool_result');
      assert.equal(fake.requests.length, 1, 'only the turn sent before the change');
      await close(uncapped);
      await close(running);
    });
  },
);
