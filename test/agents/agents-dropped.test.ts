/**
 * A parent's waiting step dropped while its sub-agent works (spec §7.6: "Cancel and delete reach the children; …
 * runs no child twice"): `POST …/retry` sends the turn again, whose new agent call starts a new child. The dropped
 * call's child is cancelled (no result of it answers a call any more), the new one runs, and what the dropped one
 * spent stays in the parent's `usage.children`, as the dropped turn's own tokens stay in its `usage`. A process that
 * dies between the retry's write and the child's wake-up leaves the cancel to any replica's agents' sweep.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { retryTurn } from '../../src/sessions/control.js';
import type { SessionDeps } from '../../src/sessions/mutate.js';
import type { SessionStore } from '../../src/store/store.js';
import type { FakeRequest } from '../../src/offline/wire.js';
import { hang, text, toolCall } from '../fake/script.js';
import { agentTool, drivenSweep } from '../helpers/agents.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';

const lookup = {
  name: 'lookup',
  description: 'a client tool',
  input_schema: { type: 'object', properties: {} },
};

/** The root asks its `kid` once per turn sent (`ask 1`, then `ask 2` after a retry). */
const root = {
  system: 'ROOT',
  input: 'start',
  tools: [agentTool('kid', { system: 'CHILD', tools: [lookup] })],
};

/**
 * The model: the root calls `kid` (`ask <n>`, n counting its calls) and ends once answered. The child asked `ask 1`
 * hangs in its turn (`first: 'running'`) or waits for its client's `lookup` (`first: 'waiting'`, its turn spent);
 * the one asked `ask 2` answers once `open` is called: until then the parent waits for it, and its parent's stop
 * (which cancels every child at work) cannot be what cancels the first. `asked` counts each prompt's requests.
 */
function model(first: 'running' | 'waiting') {
  const asked = new Map<string, number>();
  let calls = 0;
  let open = () => {};
  const gate = new Promise<void>((resolve) => (open = resolve));
  const handler = async (req: FakeRequest) => {
    const last = req.messages.at(-1);
    const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
    if (!JSON.stringify(req.system ?? '').includes('CHILD'))
      return answered ? text('root done') : toolCall('kid', { prompt: `ask ${++calls}` });
    const prompt = JSON.stringify(req.messages[0]?.content).includes('ask 1') ? 'ask 1' : 'ask 2';
    asked.set(prompt, (asked.get(prompt) ?? 0) + 1);
    if (prompt === 'ask 2') return gate.then(() => text('findings of ask 2'));
    return first === 'running' ? hang() : toolCall('lookup', {});
  };
  return { handler, asked, open };
}

interface Child {
  id: string;
  parent: { session_id: string; tool_use_id: string };
  status: string;
  stop_reason: string | null;
  usage: { total_tokens: number };
}

const children = async (a: Api, id: string): Promise<Child[]> =>
  (await a.get(`/v1/sessions/${id}/children`)).body.data;

/** The parent, waiting for its first child (`running`, or waiting itself): the child's id. */
async function parkedOnFirst(a: Api, id: string, childStatus: string): Promise<string> {
  await a.waitFor(id, (s) => s.status === 'requires_action', 20_000);
  const kid = await until(async () => (await children(a, id))[0], 20_000, 'the first child');
  await a.waitFor(kid.id, (s) => s.status === childStatus, 20_000);
  return kid.id;
}

/** The parent waits for its second child, at work; the first is no longer at work. */
async function waitingForSecond(a: Api, id: string, old: string): Promise<void> {
  const second = await until(
    async () => (await children(a, id)).find((k) => k.id !== old && k.status === 'running'),
    20_000,
    'the second child at work',
  );
  const parent = (await a.get(`/v1/sessions/${id}`)).body;
  assert.equal(parent.status, 'requires_action');
  assert.deepEqual(
    parent.required_action.tool_calls.map((c: { id: string }) => c.id),
    [second.parent.tool_use_id],
  );
}

describe('a retry of a parent whose sub-agent works', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;

  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'a:key-a' } });
    a = h.api.as('key-a');
  });
  after(() => h.close());

  for (const first of ['running', 'waiting'] as const) {
    it(`cancels the dropped call's child (${first}); the new call's child runs, once each`, async () => {
      const { handler, asked, open } = model(first);
      h.fake.setHandler(handler);
      const p = (await a.post('/v1/sessions', root)).body;
      const old = await parkedOnFirst(a, p.id, first === 'running' ? 'running' : 'requires_action');

      const r = await a.post(`/v1/sessions/${p.id}/retry`);
      assert.equal(r.status, 202, JSON.stringify(r.body));

      const dropped = await a.waitFor(old, (s) => s.status === 'idle', 20_000);
      assert.equal(dropped.stop_reason, 'cancelled');
      // Cancelled while its parent waits for the new child, which works on.
      await waitingForSecond(a, p.id, old);
      open();
      const done = await a.waitFor(p.id, (s) => s.status === 'idle', 20_000);
      assert.equal(done.stop_reason, 'end_turn');
      const last = (await a.get(`/v1/sessions/${p.id}/messages`)).body.data.at(-1);
      assert.match(JSON.stringify(last.content), /root done/);

      const kids = await children(a, p.id);
      assert.deepEqual(
        kids.map((k) => [k.id === old, k.status, k.stop_reason]),
        [
          [true, 'idle', 'cancelled'],
          [false, 'idle', 'end_turn'],
        ],
      );
      assert.deepEqual(Object.fromEntries(asked), { 'ask 1': 1, 'ask 2': 1 });
      // The dropped child's spend stays counted: both children's, once each.
      const parent = (await a.get(`/v1/sessions/${p.id}`)).body;
      const spent = kids.reduce((n, k) => n + k.usage.total_tokens, 0);
      if (first === 'waiting') assert.ok(kids[0]!.usage.total_tokens > 0, 'the dropped child spent a turn');
      assert.equal(parent.usage.children.total_tokens, spent);
    });
  }
});

describe(
  "a retry's process dies after its write, before the dropped child's wake-up",
  { timeout: 120_000 },
  () => {
    let h: Harness;
    let a: Api;

    before(async () => {
      h = await startHarness({ env: { API_KEYS: 'a:key-a', AGENT_SWEEP_MS: '3600000' } });
      await h.service.app.agents.stop();
      a = h.api.as('key-a');
    });
    after(() => h.close());

    it("any replica's sweep cancels the child: its call is no longer waited for", async () => {
      const { app } = h.service;
      const { handler, asked, open } = model('running');
      h.fake.setHandler(handler);
      const { pass } = drivenSweep(app);
      const p = (await a.post('/v1/sessions', root)).body;
      await a.waitFor(p.id, (s) => s.status === 'requires_action', 20_000);
      // The run's end wakes the parent after the commit that shows it waiting: passes until one has started its child.
      await until(
        async () => {
          await pass();
          return (await children(a, p.id))[0];
        },
        20_000,
        'the first child',
        100,
      );
      const old = await parkedOnFirst(a, p.id, 'running');

      // The retry's process dies once its write landed: nothing it does after the write reaches the store.
      let dead = false;
      const store = new Proxy(app.store, {
        get(target, key) {
          if (dead) throw new Error('killed');
          const v: unknown = Reflect.get(target, key, target);
          if (key === 'apply')
            return async (...args: Parameters<SessionStore['apply']>) => {
              const r = await target.apply(...args);
              dead = true;
              return r;
            };
          return typeof v === 'function' ? v.bind(target) : v;
        },
      }) satisfies SessionStore;
      const deps: SessionDeps = { ...app.sessionDeps, store };
      await assert.rejects(retryTurn(deps, 'a', p.id, {}), /killed/);

      // The re-sent turn calls `kid` again; passes (another replica's sweep) start its child and cancel the old one.
      await until(
        async () => {
          await pass();
          return (await a.get(`/v1/sessions/${old}`)).body.status === 'idle';
        },
        20_000,
        'the dropped child cancelled',
        100,
      );
      assert.equal((await a.get(`/v1/sessions/${old}`)).body.stop_reason, 'cancelled');
      await waitingForSecond(a, p.id, old);
      open();
      await until(
        async () => {
          await pass();
          return (await a.get(`/v1/sessions/${p.id}`)).body.status === 'idle';
        },
        20_000,
        'the parent done',
        100,
      );
      const kids = await children(a, p.id);
      assert.deepEqual(
        kids.map((k) => [k.id === old, k.stop_reason]),
        [
          [true, 'cancelled'],
          [false, 'end_turn'],
        ],
      );
      assert.deepEqual(Object.fromEntries(asked), { 'ask 1': 1, 'ask 2': 1 });
    });
  },
);
