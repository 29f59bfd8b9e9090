/**
 * Sub-agents (spec §7.6): a writer session calls its `researcher` sub-agent; the child session runs with the call's
 * prompt and its final text becomes the call's result. Cancel and delete reach the children; depth is bounded.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { writerResearcher } from '../helpers/agents.js';
import { text, toolCalls, toolUse } from '../fake/script.js';
import type { FakeRequest } from '../../src/offline/wire.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { until } from '../durability/chaos-lib.js';
import { treeDueKey } from '../../src/store/tree-due.js';
import { childrenKey } from '../../src/agents/sweep.js';

const researcher = (session: Record<string, unknown> = {}) => ({
  type: 'agent',
  name: 'researcher',
  description: 'Researches a question and answers with findings.',
  session: { system: 'You are a researcher.', ...session },
});
const lookup = {
  name: 'lookup',
  description: 'a client tool',
  input_schema: { type: 'object', properties: {} },
};

const tokens = (u: Record<string, number>) =>
  u['input_tokens']! +
  u['output_tokens']! +
  u['cache_creation_input_tokens']! +
  u['cache_read_input_tokens']!;

describe('sub-agents', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let h: Harness;
  let r: Redis;
  let a: Api;
  /** From the first test: the usage of the writer's first turn, and its researcher's tokens. */
  let firstTurn: Record<string, number>;
  let childTokens = 0;

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    fake.setHandler(writerResearcher);
    h = await startHarness({
      env: { API_KEYS: 'a:key-a,b:key-b', AGENT_SWEEP_MS: '50', TOOL_RESULT_MAX_BYTES: '4096' },
      redis,
      fakeServer: fake,
    });
    a = h.api.as('key-a');
    r = new Redis(redis.url);
  });
  after(async () => {
    r.disconnect();
    await h.close();
    await fake.close();
    await redis.stop();
  });

  /** A writer whose researcher waits for its client (a `lookup` call): the parent parked on the child's call. */
  async function parkedTree() {
    const waiting = researcher({ system: 'You are a researcher who waits.', tools: [lookup] });
    const p = (await a.post('/v1/sessions', { system: 'You are a writer.', input: 'go', tools: [waiting] }))
      .body;
    const child = await until(
      async () => (await a.get(`/v1/sessions/${p.id}/children`)).body.data[0],
      20_000,
      'the child',
    );
    const spent = await a.waitStatus(child.id, 'requires_action', 20_000);
    return { p, child, spent, waiting };
  }

  it('a writer delegates to its researcher: the child runs, its final text is the result', async () => {
    const res = await a.post('/v1/sessions', {
      system: 'You are a writer.',
      input: 'Write a short article on why the sky is blue.',
      tools: [researcher()],
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const parent = await a.waitFor(res.body.id, (s) => s.status === 'idle', 30_000);
    assert.equal(parent.stop_reason, 'end_turn');
    const history = (await a.get(`/v1/sessions/${parent.id}/messages`)).body.data;
    const last = history.at(-1);
    assert.match(
      JSON.stringify(last.content),
      /Article, from the research \(error: false\): Findings: Rayleigh/,
    );
    const children = (await a.get(`/v1/sessions/${parent.id}/children`)).body.data;
    assert.equal(children.length, 1);
    const child = children[0];
    assert.equal(child.status, 'idle');
    assert.equal(child.parent.session_id, parent.id);
    const call = history.find((m: { role: string; content: unknown }) => m.role === 'assistant');
    assert.equal(
      child.parent.tool_use_id,
      call.content.find((b: { type: string }) => b.type === 'tool_use').id,
    );
    const childHistory = (await a.get(`/v1/sessions/${child.id}/messages`)).body.data;
    assert.match(JSON.stringify(childHistory[0].content), /Why is the sky blue\?/);
    // The child's usage shows on the parent as `usage.children`, and counts in what is left of its budget.
    const kids = parent.usage.children;
    assert.ok(child.usage.total_tokens > 0);
    assert.equal(kids.input_tokens, child.usage.input_tokens);
    assert.equal(kids.output_tokens, child.usage.output_tokens);
    assert.equal(kids.total_tokens, child.usage.total_tokens);
    assert.equal(kids.total_tokens, tokens(kids));
    assert.equal(kids.cost_usd, child.usage.cost_usd);
    // The parent's own totals stay its own.
    assert.equal(parent.usage.total_tokens, tokens(parent.usage));
    firstTurn = (await a.get(`/v1/sessions/${parent.id}/iterations`)).body.data[0].usage;
    childTokens = kids.total_tokens;
    // Another tenant sees neither.
    assert.equal((await h.api.as('key-b').get(`/v1/sessions/${parent.id}/children`)).status, 404);
    // A browser's client token: `read` of the parent lists its children; another scope is refused; a token of the
    // child does not reach the parent's list.
    const mint = async (session: string, scopes: string[]) =>
      (await a.post('/v1/client-tokens', { session_id: session, scopes })).body.token as string;
    const reader = h.api.as(await mint(parent.id, ['read']));
    const listed = await reader.get(`/v1/sessions/${parent.id}/children`);
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    assert.deepEqual(
      listed.body.data.map((c: { id: string }) => c.id),
      [child.id],
    );
    const sender = await h.api
      .as(await mint(parent.id, ['message']))
      .get(`/v1/sessions/${parent.id}/children`);
    assert.equal(sender.status, 403);
    assert.equal(sender.body.error.code, 'scope_denied');
    const ofChild = h.api.as(await mint(child.id, ['read']));
    assert.equal((await ofChild.get(`/v1/sessions/${parent.id}/children`)).status, 404);
    assert.equal((await h.api.as('key-b').get(`/v1/sessions/${child.id}`)).status, 404);
  });

  it("the child's usage counts toward the parent's budget, once", async () => {
    assert.ok(childTokens > 1, 'the first test ran');
    // Room for the writer's first turn, not for it and its researcher's usage: without the child counted, the writer
    // would go on to its article.
    const budget = { total_tokens: tokens(firstTurn) + Math.ceil(childTokens / 2) };
    const res = await a.post('/v1/sessions', {
      system: 'You are a writer.',
      input: 'Write a short article on why the sky is blue.',
      tools: [researcher()],
      budget,
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const parent = await a.waitFor(res.body.id, (s) => s.status === 'idle', 30_000);
    assert.equal(parent.stop_reason, 'budget_exhausted');
    assert.equal(parent.iteration, 1);
    assert.equal(parent.usage.children.total_tokens, childTokens);
    assert.equal(parent.usage.budget_remaining_tokens, 0);
    // The result went in once, and so did the usage: the counters match the one child.
    const child = (await a.get(`/v1/sessions/${parent.id}/children`)).body.data[0];
    assert.equal(parent.usage.children.total_tokens, child.usage.total_tokens);
    const cont = await a.post(`/v1/sessions/${parent.id}/continue`, {});
    assert.equal(cont.status, 409);
    assert.equal(cont.body.error.code, 'budget_exhausted');
  });

  it("a child gets what is left of its parent's budget; with nothing left it does not start", async () => {
    assert.ok(childTokens > 1, 'the first test ran');
    const start = (budget: Record<string, number>) =>
      a.post('/v1/sessions', {
        system: 'You are a writer.',
        input: 'Write a short article on why the sky is blue.',
        tools: [researcher({ budget: { total_tokens: 1_000_000 } })],
        budget,
      });
    // Room for the first turn and 7 tokens more: the child's own budget is capped at those 7.
    const capped = await start({ total_tokens: tokens(firstTurn) + 7 });
    assert.equal(capped.status, 201, JSON.stringify(capped.body));
    await a.waitFor(capped.body.id, (s) => s.status === 'idle', 30_000);
    const child = (await a.get(`/v1/sessions/${capped.body.id}/children`)).body.data[0];
    assert.deepEqual(child.budget, { total_tokens: 7 });
    // The first turn spends it all: the call is answered with an error, no child is made, the run stops.
    const spent = await start({ total_tokens: tokens(firstTurn) });
    const parent = await a.waitFor(spent.body.id, (s) => s.status === 'idle', 30_000);
    assert.equal(parent.stop_reason, 'budget_exhausted');
    assert.deepEqual((await a.get(`/v1/sessions/${parent.id}/children`)).body.data, []);
    const msgs = (await a.get(`/v1/sessions/${parent.id}/messages`)).body.data;
    const result = msgs.at(-1).content.find((b: { type: string }) => b.type === 'tool_result');
    assert.equal(result.is_error, true);
    assert.match(String(result.content), /budget is spent/);
  });

  it('refuses sub-agents nested deeper than 3 levels, and a sub-agent session with a history', async () => {
    const level = (inner: unknown[]) => researcher({ tools: inner });
    const ok = await a.post('/v1/sessions', { input: 'x', start: false, tools: [level([level([])])] });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    const deep = await a.post('/v1/sessions', {
      input: 'x',
      start: false,
      tools: [level([level([level([])])])],
    });
    assert.equal(deep.status, 400);
    assert.equal(deep.body.error.code, 'invalid_request');
    assert.match(deep.body.error.message, /at most 3/);
    const hist = await a.post('/v1/sessions', {
      input: 'x',
      start: false,
      tools: [researcher({ input: 'hi' })],
    });
    assert.equal(hist.status, 400);
    // Without its `session`: the answer says what a sub-agent entry is.
    const { session: _, ...bare } = researcher();
    const noSession = await a.post('/v1/sessions', { input: 'x', start: false, tools: [bare] });
    assert.equal(noSession.status, 400);
    assert.match(JSON.stringify(noSession.body.error), /a sub-agent is/);
  });

  it('a parent parked while its child waits costs the sweep nothing: it is not looked at again until the child ends', async () => {
    const { p, child } = await parkedTree();
    // Its next look is the sweep's safety net (a minute away), not a poll every 10 s: one tenant's thousands of parked
    // trees would fill the sweep every tenant's trees share.
    await until(
      async () => Number(await r.zscore(treeDueKey('a'), p.id)) > Date.now() + 30_000,
      20_000,
      "the parked parent's next look a minute away",
    );
    // The child's end still wakes it at once.
    const call = (await a.get(`/v1/sessions/${child.id}`)).body.required_action.tool_calls[0];
    const sent = await a.post(`/v1/sessions/${child.id}/tool-results`, {
      results: [{ tool_use_id: call.id, content: 'found' }],
    });
    assert.ok(sent.status < 300, JSON.stringify(sent.body));
    const done = await a.waitFor(p.id, (s) => s.status === 'idle', 30_000);
    assert.equal(done.stop_reason, 'end_turn');
  });

  it('cancel and delete of the parent reach the child', async () => {
    const { p, child, waiting } = await parkedTree();
    const waitingParent = await a.waitStatus(p.id, 'requires_action');
    assert.equal(waitingParent.required_action.tool_calls[0].name, 'researcher');
    // The child's pending action surfaces on the parent (GET only), naming the child and the call it answers.
    const childAction = (await a.get(`/v1/sessions/${child.id}`)).body.required_action;
    assert.equal(childAction.tool_calls[0].name, 'lookup');
    const surfaced = (await a.get(`/v1/sessions/${p.id}`)).body.required_action;
    assert.deepEqual(surfaced.children_waiting, [
      {
        session_id: child.id,
        tool_use_id: waitingParent.required_action.tool_calls[0].id,
        required_action: childAction,
      },
    ]);
    assert.equal((await a.post(`/v1/sessions/${p.id}/cancel`)).status < 300, true);
    const cancelled = await a.waitFor(child.id, (s) => s.status === 'idle', 30_000);
    assert.equal(cancelled.stop_reason, 'cancelled');
    // What the child spent counts on the parent though its result answers nothing now (the budget keeps it).
    assert.ok(cancelled.usage.total_tokens > 0);
    const kept = await until(
      async () => {
        const x = (await a.get(`/v1/sessions/${p.id}`)).body;
        return x.usage.children.total_tokens > 0 ? x : null;
      },
      20_000,
      "the child's usage on the parent",
    );
    assert.equal(kept.usage.children.total_tokens, cancelled.usage.total_tokens);

    const p2 = (await a.post('/v1/sessions', { system: 'You are a writer.', input: 'go', tools: [waiting] }))
      .body;
    const child2 = await until(
      async () => (await a.get(`/v1/sessions/${p2.id}/children`)).body.data[0],
      20_000,
      'the child',
    );
    assert.equal((await a.req('DELETE', `/v1/sessions/${p2.id}`)).status, 200);
    await until(
      async () => (await a.get(`/v1/sessions/${child2.id}`)).status === 404,
      30_000,
      'the child deleted',
    );
  });

  it('a child deleted before it ended: what it spent counts toward its parent', async () => {
    const { p, child, spent } = await parkedTree();
    assert.ok(spent.usage.total_tokens > 0);
    assert.equal((await a.req('DELETE', `/v1/sessions/${child.id}`)).status, 200);
    const counted = await until(
      async () => {
        const x = (await a.get(`/v1/sessions/${p.id}`)).body;
        return x.usage.children.total_tokens > 0 ? x : null;
      },
      20_000,
      "the deleted child's usage on the parent",
    );
    assert.equal(counted.usage.children.total_tokens, spent.usage.total_tokens);
    assert.equal(counted.usage.children.cost_usd, spent.usage.cost_usd);
    // Its call is answered as deleted, and nothing is counted twice.
    await a.waitFor(p.id, (s) => s.status !== 'running' && s.status !== 'requires_action', 30_000);
    const after = (await a.get(`/v1/sessions/${p.id}`)).body;
    assert.equal(after.usage.children.total_tokens, spent.usage.total_tokens);
  });

  it("a fork of a tree is a session of its own: its sub-agents run for it, and a child's fork answers no parent", async () => {
    const p = (
      await a.post('/v1/sessions', { system: 'You are a writer.', input: 'Sky?', tools: [researcher()] })
    ).body;
    const done = await a.waitFor(p.id, (s) => s.status === 'idle', 30_000);
    const [child] = (await a.get(`/v1/sessions/${p.id}/children`)).body.data;
    // Forked before the writer's first reply, then sent on: its own researcher answers it.
    const f = (await a.post(`/v1/sessions/${p.id}/fork`, { at_iteration: 0 })).body;
    assert.equal((await a.post(`/v1/sessions/${f.id}/continue`)).status, 202);
    const forked = await a.waitFor(f.id, (s) => s.status === 'idle', 30_000);
    assert.equal(forked.stop_reason, 'end_turn');
    const own = (await a.get(`/v1/sessions/${f.id}/children`)).body.data;
    assert.equal(own.length, 1);
    assert.notEqual(own[0].id, child.id);
    // A fork of the child is no child: nothing of the writer's is answered by it.
    const cf = (await a.post(`/v1/sessions/${child.id}/fork`, { at_iteration: 0 })).body;
    assert.equal(cf.parent, null);
    assert.equal((await a.get(`/v1/sessions/${p.id}`)).body.revision, done.revision);
  });

  it('a sub-agent added by PATCH works as one given at create', async () => {
    const s = (await a.post('/v1/sessions', { system: 'You are a writer.', input: 'x', start: false })).body;
    const bad = await a.req('PATCH', `/v1/sessions/${s.id}`, { tools: [researcher({ messages: [] })] });
    assert.equal(bad.status, 400);
    assert.equal((await a.req('PATCH', `/v1/sessions/${s.id}`, { tools: [researcher()] })).status, 200);
    assert.ok(
      (await a.post(`/v1/sessions/${s.id}/messages`, { content: 'Write about the sky.' })).status < 300,
    );
    await a.waitFor(s.id, (x) => x.status === 'idle' && x.iteration >= 2, 30_000);
    const last = (await a.get(`/v1/sessions/${s.id}/messages`)).body.data.at(-1);
    assert.match(JSON.stringify(last.content), /Findings: Rayleigh/);
    assert.equal((await a.get(`/v1/sessions/${s.id}/children`)).body.data.length, 1);
  });

  it("a child that fails answers the parent's call with is_error", async () => {
    const broken = researcher({ system: 'You are a broken researcher.' });
    const s = (await a.post('/v1/sessions', { system: 'You are a writer.', input: 'go', tools: [broken] }))
      .body;
    await a.waitFor(s.id, (x) => x.status === 'idle', 30_000);
    const child = (await a.get(`/v1/sessions/${s.id}/children`)).body.data[0];
    assert.equal(child.status, 'failed');
    const last = (await a.get(`/v1/sessions/${s.id}/messages`)).body.data.at(-1);
    assert.match(JSON.stringify(last.content), /error: true\): Error: the sub-agent failed: /);
  });

  /** `writerResearcher`, but a "twin" writer calls its researcher twice in one turn, a "verbose" researcher answers 5 kB. */
  const twins = (req: FakeRequest) => {
    const sys = typeof req.body.system === 'string' ? req.body.system : '';
    const last = req.body.messages.at(-1);
    const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
    if (sys.includes('twin writer'))
      return answered
        ? text('Both answered.')
        : toolCalls([toolUse('researcher', { prompt: 'one' }), toolUse('researcher', { prompt: 'two' })]);
    if (sys.includes('verbose')) return text('Findings: '.repeat(500));
    return writerResearcher(req);
  };

  /** `twins`, but "a writer of <n>" calls its researcher n times in one turn. */
  const many = (req: FakeRequest) => {
    const sys = typeof req.body.system === 'string' ? req.body.system : '';
    const n = /a writer of (\d+)/.exec(sys)?.[1];
    if (n === undefined) return twins(req);
    const last = req.body.messages.at(-1);
    const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
    if (answered) return text('All answered.');
    return toolCalls(Array.from({ length: Number(n) }, (_, i) => toolUse('researcher', { prompt: `q${i}` })));
  };

  /** A parent whose one turn made `n` children (all ended: the parent idle), with `tools` for its researcher. */
  async function parentOf(n: number, tool = researcher()) {
    fake.setHandler(many);
    try {
      const s = (
        await a.post('/v1/sessions', { system: `You are a writer of ${n}.`, input: 'go', tools: [tool] })
      ).body;
      assert.ok(s.id, JSON.stringify(s));
      await a.waitFor(s.id, (x) => x.status === 'idle', 60_000);
      return s.id as string;
    } finally {
      fake.setHandler(writerResearcher);
    }
  }

  type Page = {
    status: number;
    body: { data: Array<{ id: string; created_at: string }>; next_cursor: string | null; has_more: boolean };
  };
  /** Every page of `…/children?limit=` for `as`, in order. */
  async function pages(as: Api, id: string, limit: number): Promise<Page['body'][]> {
    const out: Page['body'][] = [];
    let cursor: string | null = null;
    for (let i = 0; i < 20; i++) {
      const q: string = cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`;
      const r: Page = await as.get(`/v1/sessions/${id}/children?limit=${limit}${q}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      out.push(r.body);
      assert.equal(r.body.has_more, r.body.next_cursor !== null);
      if (!r.body.has_more) return out;
      cursor = r.body.next_cursor;
    }
    assert.fail('the pages never ended');
  }
  const ids = (ps: Page['body'][]) => ps.map((p) => p.data.map((c) => c.id));

  it('children are paged oldest first: limit, cursor, has_more exact; bad queries 400, another tenant 404', async () => {
    const id = await parentOf(5);
    // The set's order: the time each create was recorded, then the id.
    const order = await r.zrange(childrenKey(id), 0, -1);
    assert.equal(order.length, 5);
    const paged = await pages(a, id, 2);
    assert.deepEqual(ids(paged), [order.slice(0, 2), order.slice(2, 4), order.slice(4)]);
    assert.deepEqual(
      paged.map((p) => p.has_more),
      [true, true, false],
    );
    assert.equal(paged[2]!.next_cursor, null);
    const created = paged.flatMap((p) => p.data.map((c) => Date.parse(c.created_at)));
    assert.deepEqual(
      created,
      [...created].sort((x, y) => x - y),
    );
    // A page that takes the last child says there is no more (no empty page after a full one); the default is 100.
    assert.deepEqual(ids(await pages(a, id, 5)), [order]);
    assert.deepEqual(ids(await pages(a, id, 100)), [order]);
    const all = (await a.get(`/v1/sessions/${id}/children`)).body;
    assert.deepEqual(
      [all.data.map((c: { id: string }) => c.id), all.has_more, all.next_cursor],
      [order, false, null],
    );
    // A client token with `read` of the parent pages them too.
    const token = (await a.post('/v1/client-tokens', { session_id: id, scopes: ['read'] })).body
      .token as string;
    assert.deepEqual(ids(await pages(h.api.as(token), id, 2)), ids(paged));
    // Refusals as GET /v1/sessions's.
    for (const [q, code] of [
      ['cursor=nope', 'invalid_cursor'],
      ['cursor=1%3Ases_a%3Ab', 'invalid_cursor'],
      ['limit=0', 'invalid_request'],
      ['limit=101', 'invalid_request'],
      ['limit=2.5', 'invalid_request'],
      ['status=idle', 'invalid_request'],
    ] as const) {
      const res = await a.get(`/v1/sessions/${id}/children?${q}`);
      assert.equal(res.status, 400, q);
      assert.equal(res.body.error.code, code, q);
    }
    // Another tenant: the parent is not found, with or without a cursor.
    const b = h.api.as('key-b');
    assert.equal((await b.get(`/v1/sessions/${id}/children?limit=2`)).status, 404);
    const other = await b.get(
      `/v1/sessions/${id}/children?cursor=${encodeURIComponent(paged[0]!.next_cursor!)}`,
    );
    assert.equal(other.status, 404);
    assert.equal(other.body.error.code, 'session_not_found');
  });

  it("children pages skip a deleted child and another tenant's session without ending early, and hold when a member moves", async () => {
    const id = await parentOf(5);
    const key = childrenKey(id);
    const order = await r.zrange(childrenKey(id), 0, -1);
    // All five of one score (created in one millisecond): their order is their ids'.
    const t = Number(await r.zscore(key, order[0]!));
    for (const c of order) await r.zadd(key, 'XX', t, c);
    const byId = [...order].sort();
    const first = (await a.get(`/v1/sessions/${id}/children?limit=2`)).body;
    assert.deepEqual(
      first.data.map((c: { id: string }) => c.id),
      byId.slice(0, 2),
    );
    // The cursor's child moves on (its create recorded again later) before the next page: the next page starts
    // where the cursor was, among the ties, and the moved child shows again at its new place.
    await r.zadd(key, 'XX', t + 1000, byId[1]!);
    const next = async (cursor: string) =>
      (await a.get(`/v1/sessions/${id}/children?limit=2&cursor=${encodeURIComponent(cursor)}`)).body;
    const second = await next(first.next_cursor);
    assert.deepEqual(
      second.data.map((c: { id: string }) => c.id),
      byId.slice(2, 4),
    );
    const third = await next(second.next_cursor);
    assert.deepEqual(
      third.data.map((c: { id: string }) => c.id),
      [byId[4], byId[1]],
    );
    assert.equal(third.has_more, false);
    // Members that are no child of the tenant's: a deleted child (its mark stays) and another tenant's session,
    // ahead of the others, and one between them.
    const theirs = (await h.api.as('key-b').post('/v1/sessions', { input: 'hi', start: false })).body
      .id as string;
    await r.zadd(key, 1, 'ses_subgone0', 2, theirs, t, 'ses_subgone1');
    const paged = await pages(a, id, 2);
    // The first page holds none of them (both skipped) yet says there is more; no page ends the list early.
    assert.deepEqual(paged[0]!.data, []);
    assert.equal(paged[0]!.has_more, true);
    const seen = paged.flatMap((p) => p.data.map((c) => c.id));
    assert.deepEqual(
      seen,
      (await r.zrange(key, 0, -1)).filter((m) => order.includes(m)),
    );
    assert.equal(seen.length, 5);
  });

  it('a page of children stops before 1 MiB of them, never empty', async () => {
    const big = researcher({ system: `You are a researcher. ${'x'.repeat(400_000)}` });
    const id = await parentOf(3, big);
    const paged = await pages(a, id, 100);
    // Two 400 kB children fit, the third would take the page past 1 MiB: it opens the next page.
    assert.deepEqual(
      paged.map((p) => p.data.length),
      [2, 1],
    );
    for (const p of paged)
      assert.ok(
        Buffer.byteLength(JSON.stringify(p)) <= 1_048_576,
        `${Buffer.byteLength(JSON.stringify(p))} bytes`,
      );
    assert.deepEqual(ids(paged).flat(), await r.zrange(childrenKey(id), 0, -1));
  });

  it("children started together share what is left of the parent's budget", async () => {
    fake.setHandler(twins);
    try {
      const room = 10_000;
      const s = (
        await a.post('/v1/sessions', {
          system: 'You are a twin writer.',
          input: 'Ask twice.',
          tools: [researcher({ budget: { total_tokens: 1_000_000 } })],
          budget: { total_tokens: tokens(firstTurn) + room },
        })
      ).body;
      await a.waitFor(s.id, (x) => x.status === 'idle', 30_000);
      const first = (await a.get(`/v1/sessions/${s.id}/iterations`)).body.data[0].usage;
      const left = tokens(firstTurn) + room - tokens(first);
      const kids = (await a.get(`/v1/sessions/${s.id}/children`)).body.data;
      assert.equal(kids.length, 2);
      const caps = kids
        .map((k: { budget: { total_tokens: number } }) => k.budget.total_tokens)
        .sort((x: number, y: number) => x - y);
      // Each got half of what was left, not all of it: together they cannot spend past the parent's budget.
      assert.deepEqual(caps, [Math.floor(left / 2), left - Math.floor(left / 2)], JSON.stringify(caps));
    } finally {
      fake.setHandler(writerResearcher);
    }
  });

  it("a child's answer past TOOL_RESULT_MAX_BYTES is an is_error result naming the limit", async () => {
    fake.setHandler(twins);
    try {
      const verbose = researcher({ system: 'You are a verbose researcher.' });
      const s = (await a.post('/v1/sessions', { system: 'You are a writer.', input: 'go', tools: [verbose] }))
        .body;
      await a.waitFor(s.id, (x) => x.status === 'idle', 30_000);
      const msgs = (await a.get(`/v1/sessions/${s.id}/messages`)).body.data;
      const result = msgs
        .flatMap((m: { content: unknown }) => (Array.isArray(m.content) ? m.content : []))
        .find((b: { type: string }) => b.type === 'tool_result');
      assert.equal(result.is_error, true);
      assert.match(JSON.stringify(result.content), /5000 bytes.*TOOL_RESULT_MAX_BYTES/);
    } finally {
      fake.setHandler(writerResearcher);
    }
  });
});
