/**
 * A sub-agent's call answered by its parent's action deadline (spec §7.4 with §7.6): the child no longer answers
 * anything, so it is cancelled, and what it spent until then counts toward the parent (its `usage.children`, and so
 * its budget), once, whichever of the timeout and the agents' sweep counts it first.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { FakeRequest } from '../../src/offline/wire.js';
import { hang, text, toolCall } from '../fake/script.js';
import { startHarness, type Harness } from '../helpers/service.js';

/** The effective `system` (a thread's continuation carries none of its own). */
const systemOf = (req: FakeRequest) => JSON.stringify(req.system ?? '');

/** The researcher adds, then never answers its second turn; the writer asks it, then writes from the result. */
function slowResearcher(req: FakeRequest) {
  const last = req.messages.at(-1);
  const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
  if (systemOf(req).includes('researcher')) {
    if (!answered)
      return toolCall(
        'calculate_sum',
        { a: 1, b: 2 },
        { usage: { input_tokens: 1000, output_tokens: 1300 } },
      );
    return hang();
  }
  if (!answered) return toolCall('researcher', { prompt: 'Why is the sky blue?' });
  return text('Written without the research.');
}

/** A writer whose call to its researcher times out after 4 s. */
const timedWriter = {
  system: 'You are a writer.',
  input: 'Write about the sky.',
  // Seconds enough for the child's first turn to end before the deadline, on a busy machine too.
  action_timeout_s: 4,
  tools: [
    {
      type: 'agent',
      name: 'researcher',
      description: 'Researches a question.',
      session: { system: 'You are a researcher.', tools: ['calculate_sum'] },
    },
  ],
};

describe('a sub-agent call timed out by its parent', { timeout: 60_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({
      env: { ACTION_TIMEOUT_MIN_S: '1', DEADLINE_SWEEP_MS: '50', AGENT_SWEEP_MS: '50' },
    });
    h.fake.setHandler(slowResearcher);
  });
  after(async () => h?.close());

  it('cancels the child and counts what it spent toward the parent', async () => {
    const res = await h.api.post('/v1/sessions', timedWriter);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const parent = await h.api.waitFor(res.body.id, (s) => s.status === 'idle' && s.iteration === 2, 30_000);
    const history = (await h.api.get(`/v1/sessions/${parent.id}/messages`)).body.data;
    assert.match(JSON.stringify(history[2].content), /Error: no result within 4 s/);
    const [listed] = (await h.api.get(`/v1/sessions/${parent.id}/children`)).body.data;
    const child = await h.api.waitFor(listed.id, (s) => s.status !== 'running', 10_000);
    assert.equal(child.stop_reason, 'cancelled');
    assert.ok(child.usage.total_tokens >= 2300, 'its first turn ended before the deadline');
    // Counted once: the parent's view of its child is the child's own usage.
    const after = (await h.api.get(`/v1/sessions/${parent.id}`)).body;
    assert.equal(after.usage.children.total_tokens, child.usage.total_tokens);
    assert.equal(after.usage.children.cost_usd, child.usage.cost_usd);
  });

  it('counts the child once when the agents sweep counts it between the deadline read and its write', async () => {
    const store = h.service.app.store;
    const apply = store.apply.bind(store);
    let parentId = '';
    let raced = false;
    // The race, made certain: the sweep's count (which moves no revision) lands just before the timeout's write.
    store.apply = async (...args: Parameters<typeof store.apply>) => {
      const [id, , ops] = args;
      if (id === parentId && !raced && ops.events?.some((e) => e[0] === 'tool_result.submitted')) {
        raced = true;
        const [listed] = (await h.api.get(`/v1/sessions/${id}/children`)).body.data;
        const child = await store.load(listed.id);
        assert.ok(child);
        await store.addChildUsage(id, child);
      }
      return apply(...args);
    };
    try {
      const res = await h.api.post('/v1/sessions', timedWriter);
      assert.equal(res.status, 201, JSON.stringify(res.body));
      parentId = res.body.id;
      await h.api.waitFor(parentId, (s) => s.status === 'idle' && s.iteration === 2, 30_000);
      assert.ok(raced, "the timeout's write ran after the sweep's count");
      const [listed] = (await h.api.get(`/v1/sessions/${parentId}/children`)).body.data;
      const child = await h.api.waitFor(listed.id, (s) => s.status !== 'running', 10_000);
      assert.ok(child.usage.total_tokens >= 2300, 'its first turn ended before the deadline');
      const after = (await h.api.get(`/v1/sessions/${parentId}`)).body;
      assert.equal(after.usage.children.total_tokens, child.usage.total_tokens);
      assert.equal(after.usage.children.cost_usd, child.usage.cost_usd);
    } finally {
      store.apply = apply;
    }
  });
});

describe('a sub-agent whose spend takes the tenant over its daily cap', { timeout: 60_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { AGENT_SWEEP_MS: '50', TENANT_MAX_COST_USD_PER_DAY: '0.01' } });
    // The researcher's answer costs $0.015 on claude-sonnet-5-5: the day is over the cap once it is counted.
    h.fake.setHandler((req) => {
      if (systemOf(req).includes('researcher'))
        return text('Findings.', { usage: { input_tokens: 1000, output_tokens: 1300 } });
      const last = req.messages.at(-1);
      const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
      return answered ? text('Never sent.') : toolCall('researcher', { prompt: 'Why?' });
    });
  });
  after(async () => h?.close());

  it("its result still answers the call, and the parent's run stops before its next request", async () => {
    const res = await h.api.post('/v1/sessions', {
      system: 'You are a writer.',
      input: 'Write.',
      tools: [
        {
          type: 'agent',
          name: 'researcher',
          description: 'Researches.',
          session: { system: 'You are a researcher.' },
        },
      ],
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const parent = await h.api.waitFor(res.body.id, (s) => s.status === 'idle', 30_000);
    assert.equal(parent.stop_reason, 'tenant_budget_exhausted');
    assert.equal(parent.usage.children.cost_usd, 0.015);
    const history = (await h.api.get(`/v1/sessions/${parent.id}/messages`)).body.data;
    assert.match(JSON.stringify(history.at(-1).content), /Findings\./);
    assert.equal(h.fake.requests.length, 2, "the parent's first turn and the child's");
  });
});
