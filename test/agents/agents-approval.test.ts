/**
 * A sub-agent's call waits for approve/deny/edit under its parent's `approval` (`always`, or a list naming the agent
 * tool), as a server tool's does: a child session spends the tree's budget. Before, agent calls were client calls to
 * the engine, which never wait for approval: the sweep created the child at once whatever the policy. The call
 * waits at `approve_tool_calls` with no child; approve creates the child (with the edited prompt, when edited); deny
 * answers the call with the denial and creates none. Under `pause_after_turn` the parent's reply is reviewed first:
 * no child and no decision while it is (a child's result would otherwise `continue` the review, an approval run
 * the call before it).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { AgentSweep } from '../../src/agents/sweep.js';
import { childSessionId } from '../../src/agents/waiting.js';
import { treeDueKey, type TreeEntry } from '../../src/store/tree-due.js';
import {
  drivenSweep,
  harnessWithoutSweep,
  writerResearcher,
  writerWithResearcher,
} from '../helpers/agents.js';
import { text, toolCalls, toolUse } from '../fake/script.js';
import type { Api, Harness } from '../helpers/service.js';
import { skewed } from '../helpers/skewed-clock.js';

/** One look of a sweep at one member of tenant `a`'s due set (what its loop does for each due member). */
const look = (sweep: AgentSweep, id: string) =>
  (sweep as unknown as { tick(e: TreeEntry): Promise<void> }).tick({ id, tenant: 'a', score: '0' });

describe("a sub-agent's call under its parent's approval policy", { timeout: 60_000 }, () => {
  let h: Harness;
  let a: Api;
  let sweep: AgentSweep;
  let pass: () => Promise<void>;

  before(async () => {
    h = await harnessWithoutSweep();
    a = h.api.as('key-a');
    ({ sweep, pass } = drivenSweep(h.service.app));
  });
  after(() => h.close());

  /** A writer under `approval` (and `extra`), at its first stop: the session and the researcher call's id. */
  async function writer(approval: unknown, extra: Record<string, unknown> = {}) {
    const created = await a.post('/v1/sessions', { ...writerWithResearcher, approval, ...extra });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const s = await a.waitFor(created.body.id, (x) => x.status === 'requires_action', 20_000);
    const call = s.required_action.tool_calls[0];
    assert.equal(call.name, 'researcher');
    return { s, callId: call.id as string, childId: childSessionId(s.id, call.id) };
  }

  const children = async (id: string) => (await a.get(`/v1/sessions/${id}/children`)).body.data;

  /**
   * Sweep passes until session `id` is as `ok` says (at most 20 s): a child's run end, which wakes the sweep for it,
   * lands after the commit that shows the child idle, so one pass right after may come too soon.
   */
  async function passUntil(id: string, ok: (s: any) => boolean): Promise<any> {
    for (const t0 = Date.now(); ;) {
      await pass();
      const now = (await a.get(`/v1/sessions/${id}`)).body;
      if (ok(now)) return now;
      assert.ok(Date.now() - t0 < 20_000, `session ${id} is still ${JSON.stringify(now).slice(0, 1500)}`);
    }
  }
  const exists = async (id: string) => (await a.get(`/v1/sessions/${id}`)).status === 200;

  /**
   * A writer under `approval: "always"` whose first reply makes the calls `calls` (with these ids), stopped at
   * `approve_tool_calls` and moved on by the sweep's passes (its look at the stop found no child to start: the
   * next one is the tree's hourly safety net), so only a wake-up brings the sweep back to it.
   */
  async function parkedWriter(calls: Array<[name: string, input: unknown, id: string]>) {
    h.fake.setHandler((req) => {
      const last = req.body.messages.at(-1);
      const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
      if (JSON.stringify(req.body.system ?? '').includes('researcher')) return text(`Findings.`);
      return answered ? text('Done.') : toolCalls(calls.map(([n, input, id]) => toolUse(n, input, id)));
    });
    const created = await a.post('/v1/sessions', {
      ...writerWithResearcher,
      tools: [...writerWithResearcher.tools, 'get_weather'],
      approval: 'always',
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const s = await a.waitFor(created.body.id, (x) => x.status === 'requires_action', 20_000);
    assert.equal(s.required_action.type, 'approve_tool_calls');
    // The run's end wakes the member (after its commit, which the status above shows): passes until the look at
    // the stop has moved it on.
    for (;;) {
      await pass();
      const score = Number(await h.service.app.redis.zscore(treeDueKey('a'), s.id));
      if (score > Date.now() + 600_000) return s;
    }
  }

  /** `fn` on a writer parked by parkedWriter(`calls`); the fake's handler is given back after, whatever happens. */
  async function onParkedWriter(
    calls: Array<[name: string, input: unknown, id: string]>,
    fn: (s: Awaited<ReturnType<typeof parkedWriter>>) => Promise<void>,
  ) {
    try {
      await fn(await parkedWriter(calls));
    } finally {
      h.fake.setHandler(writerResearcher);
    }
  }

  it('approval "always": the call waits with no child; approved with an edited prompt, the child runs it', async () => {
    const { s, callId, childId } = await writer('always');
    assert.equal(s.required_action.type, 'approve_tool_calls');
    // The sweep's look creates no child while the call waits for its decision.
    await look(sweep, s.id);
    assert.deepEqual(await children(s.id), []);
    assert.equal((await a.get(`/v1/sessions/${childId}`)).status, 404);

    // An edit must keep a prompt.
    const bad = await a.post(`/v1/sessions/${s.id}/tool-calls/${callId}`, {
      decision: 'approve',
      input: { prompt: 42 },
    });
    assert.equal(bad.status, 400, JSON.stringify(bad.body));
    assert.equal(bad.body.error.code, 'invalid_tool_input');
    // A prompt of only whitespace is no prompt either: the child's `input` must have some text.
    const blank = await a.post(`/v1/sessions/${s.id}/tool-calls/${callId}`, {
      decision: 'approve',
      input: { prompt: ' \n\t ' },
    });
    assert.equal(blank.status, 400, JSON.stringify(blank.body));
    assert.equal(blank.body.error.code, 'invalid_tool_input');
    assert.equal(blank.body.error.details[0].path, '/input/prompt');

    const approved = await a.post(`/v1/sessions/${s.id}/tool-calls/${callId}`, {
      decision: 'approve',
      input: { prompt: 'Why is the sky blue at noon?' },
    });
    assert.equal(approved.status, 202, JSON.stringify(approved.body));
    const waits = await a.waitFor(
      s.id,
      (x) => x.status === 'requires_action' && x.required_action.type === 'submit_tool_results',
      20_000,
    );
    assert.deepEqual(waits.required_action.tool_calls[0].input, { prompt: 'Why is the sky blue at noon?' });
    await look(sweep, s.id);
    const child = await a.waitFor(childId, (x) => x.status === 'idle', 20_000);
    const asked = (await a.get(`/v1/sessions/${childId}/messages`)).body.data[0];
    assert.match(JSON.stringify(asked.content), /Why is the sky blue at noon\?/);
    assert.equal(child.parent.tool_use_id, callId);

    await look(sweep, childId);
    await a.waitFor(s.id, (x) => x.status === 'idle', 20_000);
    const last = (await a.get(`/v1/sessions/${s.id}/messages`)).body.data.at(-1);
    assert.match(JSON.stringify(last.content), /\(error: false\): Findings: Rayleigh/);
  });

  it('a list naming the agent tool: denied, the call is answered with the denial and no child is made', async () => {
    const { s, callId, childId } = await writer(['researcher']);
    assert.equal(s.required_action.type, 'approve_tool_calls');
    await look(sweep, s.id);
    // A client's result for a call that waits for its decision is refused, as for a server call: it would stand
    // whatever the decision.
    const early = await a.req('PUT', `/v1/sessions/${s.id}/tool-results/${callId}`, { content: 'mine' });
    assert.equal(early.status, 409, JSON.stringify(early.body));
    assert.equal(early.body.error.code, 'tool_result_not_expected');
    const denied = await a.post(`/v1/sessions/${s.id}/tool-calls/${callId}`, {
      decision: 'deny',
      reason: 'not now',
    });
    assert.equal(denied.status, 202, JSON.stringify(denied.body));
    await a.waitFor(s.id, (x) => x.status === 'idle', 20_000);
    await look(sweep, s.id);
    const last = (await a.get(`/v1/sessions/${s.id}/messages`)).body.data.at(-1);
    assert.match(JSON.stringify(last.content), /\(error: true\): Tool call denied: not now/);
    assert.deepEqual(await children(s.id), []);
    assert.equal((await a.get(`/v1/sessions/${childId}`)).status, 404);
  });

  it('a denied call, others still undecided, takes no client result either: its denial answers it', async () => {
    // The writer asks two questions at once.
    h.fake.setHandler((req) => {
      const last = req.messages.at(-1);
      const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
      if (answered) return text('Done.');
      return toolCalls([toolUse('researcher', { prompt: 'A?' }), toolUse('researcher', { prompt: 'B?' })]);
    });
    try {
      const created = await a.post('/v1/sessions', { ...writerWithResearcher, approval: 'always' });
      const s = await a.waitFor(created.body.id, (x) => x.status === 'requires_action', 20_000);
      const [first, second] = s.required_action.tool_calls.map((c: { id: string }) => c.id);
      const denied = await a.post(`/v1/sessions/${s.id}/tool-calls/${first}`, { decision: 'deny' });
      assert.equal(denied.status, 200, JSON.stringify(denied.body));
      for (const id of [first, second]) {
        const put = await a.req('PUT', `/v1/sessions/${s.id}/tool-results/${id}`, { content: 'mine' });
        assert.equal(put.status, 409, JSON.stringify(put.body));
        assert.equal(put.body.error.code, 'tool_result_not_expected');
      }
      const batch = await a.post(`/v1/sessions/${s.id}/tool-results`, {
        results: [{ tool_use_id: first, content: 'mine' }],
      });
      assert.equal(batch.status, 409, JSON.stringify(batch.body));
      assert.equal(
        (await a.post(`/v1/sessions/${s.id}/tool-calls/${second}`, { decision: 'deny' })).status,
        202,
      );
      await a.waitFor(s.id, (x) => x.status === 'idle', 20_000);
      const results = (await a.get(`/v1/sessions/${s.id}/messages`)).body.data[2].content;
      assert.deepEqual(
        results.map((b: { content: string; is_error: boolean }) => [b.content, b.is_error]),
        [
          ['Tool call denied.', true],
          ['Tool call denied.', true],
        ],
      );
    } finally {
      h.fake.setHandler(writerResearcher);
    }
  });

  it("pause_after_turn: a reviewed reply's agent call has no child until continue, nor does its child's end continue", async () => {
    const { s, callId, childId } = await writer('default', { pause_after_turn: true });
    assert.equal(s.required_action.type, 'review_turn');
    // The sweep's look creates no child while the reply is under review.
    await look(sweep, s.id);
    assert.deepEqual(await children(s.id), []);
    assert.equal((await a.get(`/v1/sessions/${childId}`)).status, 404);

    const c = await a.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const waits = await a.waitFor(
      s.id,
      (x) => x.status === 'requires_action' && x.required_action.type === 'submit_tool_results',
      20_000,
    );
    assert.equal(waits.required_action.tool_calls[0].id, callId);
    await look(sweep, s.id);
    await a.waitFor(childId, (x) => x.status === 'idle', 20_000);
    // The child's result answers the call; the parent's next reply is reviewed in turn.
    await look(sweep, childId);
    const next = await a.waitFor(s.id, (x) => x.status === 'requires_action' && x.iteration === 2, 20_000);
    assert.equal(next.required_action.type, 'review_turn');
    assert.match(
      JSON.stringify(next.required_action.message.content),
      /\(error: false\): Findings: Rayleigh/,
    );
  });

  it("pause_after_turn: a reviewed reply's agent call takes no client result until continue", async () => {
    const { s, callId, childId } = await writer('default', { pause_after_turn: true });
    assert.equal(s.required_action.type, 'review_turn');
    // With nothing else missing, a result taken now would start the run with the reply still under review.
    const early = await a.req('PUT', `/v1/sessions/${s.id}/tool-results/${callId}`, {
      content: 'Findings: mine.',
    });
    assert.equal(early.status, 409, JSON.stringify(early.body));
    assert.equal(early.body.error.code, 'tool_result_not_expected');
    assert.match(early.body.error.message, /under review.*continue/);
    const many = await a.post(`/v1/sessions/${s.id}/tool-results`, {
      results: [{ tool_use_id: callId, content: 'Findings: mine.' }],
      continue: true,
    });
    assert.equal(many.status, 409, JSON.stringify(many.body));
    assert.equal(many.body.error.code, 'tool_result_not_expected');
    const still = (await a.get(`/v1/sessions/${s.id}`)).body;
    assert.equal(still.status, 'requires_action');
    assert.equal(still.required_action.type, 'review_turn');
    assert.equal(still.revision, s.revision, 'nothing written');
    await look(sweep, s.id);
    assert.deepEqual(await children(s.id), []);
    assert.equal((await a.get(`/v1/sessions/${childId}`)).status, 404);

    // After the review's continue the call takes its result, and the run goes on to the next reply's review.
    assert.equal((await a.post(`/v1/sessions/${s.id}/continue`)).status, 202);
    const waits = await a.waitFor(
      s.id,
      (x) => x.status === 'requires_action' && x.required_action.type === 'submit_tool_results',
      20_000,
    );
    const ok = await a.req('PUT', `/v1/sessions/${s.id}/tool-results/${callId}`, {
      content: 'Findings: mine.',
    });
    assert.equal(ok.status, 202, JSON.stringify(ok.body));
    const next = await a.waitFor(
      s.id,
      (x) => x.status === 'requires_action' && x.revision > waits.revision && x.iteration === 2,
      20_000,
    );
    assert.equal(next.required_action.type, 'review_turn');
  });

  it('pause_after_turn with approval "always": no decision while the reply is under review; after continue, one', async () => {
    const { s, callId, childId } = await writer('always', { pause_after_turn: true });
    assert.equal(s.required_action.type, 'review_turn');
    const early = await a.post(`/v1/sessions/${s.id}/tool-calls/${callId}`, { decision: 'approve' });
    assert.equal(early.status, 409, JSON.stringify(early.body));
    assert.equal(early.body.error.code, 'nothing_awaits_approval');
    await look(sweep, s.id);
    assert.deepEqual(await children(s.id), []);
    const still = (await a.get(`/v1/sessions/${s.id}`)).body;
    assert.equal(still.required_action.type, 'review_turn');

    assert.equal((await a.post(`/v1/sessions/${s.id}/continue`)).status, 202);
    await a.waitFor(
      s.id,
      (x) => x.status === 'requires_action' && x.required_action.type === 'approve_tool_calls',
      20_000,
    );
    await look(sweep, s.id);
    assert.deepEqual(await children(s.id), [], 'no child before the decision');
    const approved = await a.post(`/v1/sessions/${s.id}/tool-calls/${callId}`, { decision: 'approve' });
    assert.equal(approved.status, 202, JSON.stringify(approved.body));
    await a.waitFor(
      s.id,
      (x) => x.status === 'requires_action' && x.required_action.type === 'submit_tool_results',
      20_000,
    );
    await look(sweep, s.id);
    await a.waitFor(childId, (x) => x.status === 'idle', 20_000);
  });

  it('an agent call approved while another call of its step waits for its decision: its child starts at once', () =>
    onParkedWriter(
      [
        ['researcher', { prompt: 'A?' }, 'toolu_r1'],
        ['get_weather', { location: 'Paris' }, 'toolu_w'],
      ],
      async (s) => {
        const childId = childSessionId(s.id, 'toolu_r1');
        const approved = await a.post(`/v1/sessions/${s.id}/tool-calls/toolu_r1`, { decision: 'approve' });
        assert.equal(approved.status, 200, JSON.stringify(approved.body));
        // No run starts (get_weather waits) and none ends: the approval itself woke the sweep, whose next pass starts
        // the child. Before, only the last decision's run (or the tree's hourly look) did.
        await pass();
        assert.ok(await exists(childId), 'the child started at the next pass');
        await a.waitFor(childId, (x) => x.status === 'idle', 20_000);
        // Its result answers the call at the sweep's look after the child's run ended (its end, which wakes the
        // sweep, comes after the commit that shows it idle); the step still waits for get_weather's decision.
        const waits = await passUntil(s.id, (x) =>
          x.required_action?.tool_results?.some((r: { tool_use_id: string }) => r.tool_use_id === 'toolu_r1'),
        );
        assert.equal(waits.required_action.type, 'approve_tool_calls');
        assert.deepEqual(
          waits.required_action.tool_calls.map((c: { id: string }) => c.id),
          ['toolu_w'],
        );
        assert.equal(
          (await a.post(`/v1/sessions/${s.id}/tool-calls/toolu_w`, { decision: 'approve' })).status,
          202,
        );
        await a.waitFor(s.id, (x) => x.status === 'idle', 20_000);
        const results = (await a.get(`/v1/sessions/${s.id}/messages`)).body.data[2].content;
        assert.equal(results[0].content, 'Findings.');
      },
    ));

  it('two agent calls approved one by one: each child starts at its approval', () =>
    onParkedWriter(
      [
        ['researcher', { prompt: 'A?' }, 'toolu_r1'],
        ['researcher', { prompt: 'B?' }, 'toolu_r2'],
      ],
      async (s) => {
        const [first, second] = [childSessionId(s.id, 'toolu_r1'), childSessionId(s.id, 'toolu_r2')];
        assert.equal(
          (await a.post(`/v1/sessions/${s.id}/tool-calls/toolu_r1`, { decision: 'approve' })).status,
          200,
        );
        await pass();
        assert.ok(await exists(first), 'the first child started at the next pass');
        assert.equal(await exists(second), false, 'not the second, which waits for its decision');
        assert.equal(
          (await a.post(`/v1/sessions/${s.id}/tool-calls/toolu_r2`, { decision: 'approve' })).status,
          202,
        );
        // The last decision's run ends at `submit_tool_results`, and its end wakes the sweep.
        await a.waitFor(
          s.id,
          (x) => x.status === 'requires_action' && x.required_action.type === 'submit_tool_results',
          20_000,
        );
        while (!(await exists(second))) await pass();
        await a.waitFor(first, (x) => x.status === 'idle', 20_000);
        await a.waitFor(second, (x) => x.status === 'idle', 20_000);
        // As above: the sweep's looks after the children's run ends answer the calls.
        await passUntil(s.id, (x) => x.status === 'idle');
      },
    ));

  it("a child created after a page of children was read comes after that page's cursor, whatever its replica's clock", () =>
    onParkedWriter(
      [
        ['researcher', { prompt: 'A?' }, 'toolu_r1'],
        ['researcher', { prompt: 'B?' }, 'toolu_r2'],
        ['researcher', { prompt: 'C?' }, 'toolu_r3'],
        ['get_weather', { location: 'Paris' }, 'toolu_w'],
      ],
      async (s) => {
        const [c1, c2, c3] = ['toolu_r1', 'toolu_r2', 'toolu_r3'].map((c) => childSessionId(s.id, c));
        for (const [call, child] of [
          ['toolu_r1', c1!],
          ['toolu_r2', c2!],
        ] as const) {
          assert.equal(
            (await a.post(`/v1/sessions/${s.id}/tool-calls/${call}`, { decision: 'approve' })).status,
            200,
          );
          while (!(await exists(child))) await pass();
        }
        const first = (await a.get(`/v1/sessions/${s.id}/children?limit=1`)).body;
        assert.equal(first.has_more, true);
        // The third child is created by a replica 30 s behind: its mark must still sort after the cursor given out.
        await skewed(-30_000, async () => {
          assert.equal(
            (await a.post(`/v1/sessions/${s.id}/tool-calls/toolu_r3`, { decision: 'approve' })).status,
            200,
          );
          while (!(await exists(c3!))) await pass();
        });
        const seen: string[] = first.data.map((c: { id: string }) => c.id);
        for (let cursor = first.next_cursor; cursor !== null;) {
          const page = (
            await a.get(`/v1/sessions/${s.id}/children?limit=1&cursor=${encodeURIComponent(cursor)}`)
          ).body;
          seen.push(...page.data.map((c: { id: string }) => c.id));
          cursor = page.next_cursor;
        }
        assert.deepEqual(seen, [c1, c2, c3]);
        assert.equal(
          (await a.post(`/v1/sessions/${s.id}/tool-calls/toolu_w`, { decision: 'deny' })).status,
          202,
        );
        for (const c of [c1!, c2!, c3!]) await a.waitFor(c, (x) => x.status === 'idle', 20_000);
      },
    ));

  it("an approval whose process dies before its wake-up: another replica's sweep starts the child within seconds", () =>
    onParkedWriter(
      [
        ['researcher', { prompt: 'A?' }, 'toolu_r1'],
        ['get_weather', { location: 'Paris' }, 'toolu_w'],
      ],
      async (s) => {
        const childId = childSessionId(s.id, 'toolu_r1');
        // The process "dies" right after the approval's write: the wake-up after it is never sent.
        const trees = h.service.app.store.runs.trees;
        const wake = trees.wake.bind(trees);
        trees.wake = async () => {};
        try {
          const approved = await a.post(`/v1/sessions/${s.id}/tool-calls/toolu_r1`, { decision: 'approve' });
          assert.equal(approved.status, 200, JSON.stringify(approved.body));
        } finally {
          trees.wake = wake;
        }
        // The due entry written before the approval brings the member back within seconds (not the hourly look).
        const score = Number(await h.service.app.redis.zscore(treeDueKey('a'), s.id));
        assert.ok(score < Date.now() + 10_000, `due in ${score - Date.now()} ms`);
        while (!(await exists(childId))) await pass();
        await a.waitFor(childId, (x) => x.status === 'idle', 20_000);
      },
    ));

  it('"default", "never" and a list naming other tools: the call does not wait for a decision', async () => {
    for (const approval of ['default', 'never', ['get_weather']]) {
      const { s } = await writer(approval);
      assert.equal(s.required_action.type, 'submit_tool_results', JSON.stringify(approval));
    }
  });
});
