import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { reply, servedByFallback, text, toolCall } from '../fake/script.js';
import { SERVER_SIDE_FALLBACK_BETA } from '../../src/offline/wire.js';
import { PriceTable, modelPricesSchema } from '../../src/cost/prices.js';
import { loadConfig, ConfigError } from '../../src/config.js';
import { until } from '../durability/chaos-lib.js';
import { usageOnceCounted } from '../helpers/usage-day.js';

const today = () => new Date().toISOString().slice(0, 10);

describe('cost: the price table', () => {
  it('resolves model ids to families, newer generations unknown, and MODEL_PRICES over the list', () => {
    const t = new PriceTable();
    assert.equal(t.family('claude-sonnet-5-5-20260901'), 'claude-sonnet-5-5');
    assert.equal(t.family('claude-opus-4-1'), 'claude-opus-4-1');
    assert.equal(t.family('claude-opus-4-20250514'), 'claude-opus-4');
    assert.equal(t.family('us.anthropic.claude-haiku-4-5-20251001-v1:0'), 'claude-haiku-4-5');
    assert.equal(t.family('claude-sonnet-4-5@20250929'), 'claude-sonnet-4-5');
    assert.equal(t.family('global.anthropic.claude-sonnet-4-5-20250929-v1:0'), 'claude-sonnet-4-5');
    assert.equal(t.family('us-gov.anthropic.claude-haiku-4-5-20251001-v1:0'), 'claude-haiku-4-5');
    assert.equal(t.family('apac.anthropic.claude-sonnet-4-5-20250929-v1:0'), 'claude-sonnet-4-5');
    assert.equal(t.family('claude-sonnet-4-5-v2@20250929'), 'claude-sonnet-4-5');
    assert.equal(t.family('evil.notanthropic.claude-sonnet-4-5'), null);
    assert.equal(t.family('claude-opus-4-9'), null, 'not priced as claude-opus-4');
    assert.equal(t.price('claude-fake-1'), null);
    const o = new PriceTable({
      'claude-fake': { input: 1, output: 2 },
      'claude-opus-4-5': { input: 7, output: 9 },
    });
    assert.deepEqual(o.price('claude-fake-20260101'), {
      input: 1,
      output: 2,
      cache_write_5m: 1.25,
      cache_write_1h: 2,
      cache_read: 0.1,
      server_tools: { web_search_requests: 0.01, web_fetch_requests: 0 },
    });
    assert.equal(o.price('claude-opus-4-5')?.output, 9);
  });

  it("a reply a fallback served: each iteration at its model, the rest (compactions, server tools) at the reply's", () => {
    const t = new PriceTable();
    const entry = (type: string, model: string | null, input: number, output: number) => ({
      type,
      model,
      input_tokens: input,
      output_tokens: output,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
    });
    // As counted (withCompactionUsage): the entries' 300 in / 30 out, plus the compaction's 1000 in / 100 out.
    const usage = {
      input_tokens: 1300,
      output_tokens: 130,
      server_tool_use: { web_search_requests: 1 },
      iterations: [
        entry('compaction', null, 1000, 100),
        entry('message', 'claude-opus-5', 100, 10),
        entry('fallback_message', null, 200, 20),
      ],
    };
    // opus-5 100×5 + 10×25 = 750; haiku-4-5 (the reply's model) 200×1 + 20×5 = 300, its compaction 1000×1 + 100×5
    // = 1,500 and a search 10,000: 12,550 µ$.
    assert.equal(t.replyCost('claude-opus-5', 'claude-haiku-4-5', usage), 12_550);
    // Without a fallback_message entry the requested model served it all: 1300×5 + 130×25 + 10,000.
    const plain = { ...usage, iterations: usage.iterations.slice(0, 2) };
    assert.equal(t.replyCost('claude-opus-5', 'claude-haiku-4-5', plain), 19_750);
    // A part of an unpriced model: the reply has no price.
    assert.equal(t.replyCost('claude-opus-5', 'claude-fake-1', usage), null);
  });

  it('MODEL_PRICES keys are read as lookups read ids: a provider prefix, case, a Bedrock ARN', () => {
    const arn = 'arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3d4e5f6';
    const t = new PriceTable(
      modelPricesSchema.parse({
        'anthropic.claude-x': { input: 1, output: 2 },
        [arn]: { input: 3, output: 4 },
        'us.anthropic.claude-y-v1:0': { input: 5, output: 6 },
        'Claude-Z': { input: 7, output: 8 },
      }),
    );
    for (const id of [
      'anthropic.claude-x',
      'claude-x',
      'claude-x-20260101',
      'us.anthropic.claude-x-20260101-v1:0',
    ])
      assert.equal(t.price(id)?.input, 1, id);
    assert.equal(t.family(arn), arn);
    assert.equal(t.price(arn)?.input, 3);
    assert.equal(t.price(arn.toUpperCase())?.input, 3, 'case is not read');
    assert.equal(t.price(`${arn}x`), null, 'another profile');
    assert.equal(t.price('eu.anthropic.claude-y-v1:0')?.input, 5);
    assert.equal(t.price('claude-z')?.input, 7);
    // The list's families are unchanged.
    assert.equal(t.price('claude-sonnet-4-5')?.input, 3);

    const refused = (prices: Record<string, unknown>) =>
      modelPricesSchema.safeParse(prices).success === false;
    const p = { input: 1, output: 1 };
    assert.ok(refused({ 'anthropic.': p }), 'a prefix alone');
    assert.ok(refused({ 'claude-x': p, 'anthropic.claude-x': p }), 'two keys of one model');
    assert.ok(refused({ [`arn:${'a'.repeat(253)}`]: p }), 'past 256 characters');
    assert.ok(refused({ 'claude x': p }));
    assert.ok(refused({ '-claude': p }));
    assert.ok(!refused({ [`arn:${'a'.repeat(252)}`]: p }), '256 characters');
    // A long key that is not one is refused at once (one bounded character class: no backtracking).
    const t0 = performance.now();
    assert.ok(refused({ [`${'a:'.repeat(50_000)}!`]: p }));
    assert.ok(performance.now() - t0 < 1000);
  });

  it('MODEL_PRICES is validated at boot', () => {
    const base = { HOST: '127.0.0.1' };
    assert.throws(() => loadConfig({ ...base, MODEL_PRICES: '{nope' }), ConfigError);
    assert.throws(
      () => loadConfig({ ...base, MODEL_PRICES: '{"claude-x": {"input": -1, "output": 2}}' }),
      /MODEL_PRICES/,
    );
    assert.throws(() => loadConfig({ ...base, MODEL_PRICES: '{"claude-x": {"input": 1}}' }), /MODEL_PRICES/);
    const ok = loadConfig({ ...base, MODEL_PRICES: '{"claude-x": {"input": 1, "output": 2}}' });
    assert.deepEqual(ok.MODEL_PRICES, { 'claude-x': { input: 1, output: 2 } });
    const arn = 'arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3d4e5f6';
    const withArn = loadConfig({ ...base, MODEL_PRICES: JSON.stringify({ [arn]: { input: 1, output: 2 } }) });
    assert.deepEqual(withArn.MODEL_PRICES, { [arn]: { input: 1, output: 2 } });
    assert.throws(
      () =>
        loadConfig({
          ...base,
          MODEL_PRICES:
            '{"claude-x": {"input": 1, "output": 2}, "anthropic.claude-x": {"input": 1, "output": 2}}',
        }),
      /MODEL_PRICES.*same model/,
    );
    assert.equal(modelPricesSchema.safeParse({ 'Bad Name': { input: 1, output: 1 } }).success, false);
  });
});

describe('cost: usage.cost_usd of sessions, iterations and turn.completed', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  it('a scripted run with cache writes (5 min and 1 h), cache reads and web searches costs the hand-computed figure', async () => {
    // claude-sonnet-5-5: $2 in, $10 out, $2.50 5-min writes, $4 1-h writes, $0.20 reads per MTok; $10 / 1,000 searches.
    h.fake.enqueue(
      toolCall(
        'calculate_sum',
        { a: 1, b: 2 },
        {
          usage: {
            input_tokens: 1000,
            output_tokens: 200,
            cache_creation_input_tokens: 2000,
            cache_creation: { ephemeral_5m_input_tokens: 1500, ephemeral_1h_input_tokens: 500 },
            cache_read_input_tokens: 0,
          },
        },
      ),
      text('It is 3.', {
        usage: {
          input_tokens: 500,
          output_tokens: 100,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 3000,
          server_tool_use: { web_search_requests: 2, web_fetch_requests: 1 },
        },
      }),
    );
    const r = await h.api.post('/v1/sessions', {
      model: 'claude-sonnet-5-5-20260901',
      tools: ['calculate_sum'],
      input: 'Add 1 and 2',
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.usage.cost_usd, 0);
    const done = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'end_turn');
    // Turn 1: 1000×2 + 200×10 + 1500×2.5 + 500×4 = 9,750 µ$. Turn 2: 500×2 + 100×10 + 3000×0.2 + 2×10,000 = 22,600 µ$.
    const turn1 = 0.00975;
    const turn2 = 0.0226;
    assert.equal(done.usage.cost_usd, 0.03235);
    assert.equal(Math.round(done.usage.cost_usd * 100), 3, 'to the cent: $0.03');
    assert.deepEqual(done.usage.server_tool_use, { web_search_requests: 2, web_fetch_requests: 1 });
    assert.equal(done.usage.cache_read_input_tokens, 3000);

    const iters = (await h.api.get(`/v1/sessions/${r.body.id}/iterations`)).body.data;
    assert.deepEqual(
      iters.map((i: any) => i.usage.cost_usd),
      [turn1, turn2],
    );
    // Each record has its turn's server tool requests; the session's totals add them up.
    assert.deepEqual(
      iters.map((i: any) => i.usage.server_tool_use),
      [{}, { web_search_requests: 2, web_fetch_requests: 1 }],
    );
    const events = (await h.api.get(`/v1/sessions/${r.body.id}/events?limit=1000`)).body.data;
    const completed = events.filter((e: any) => e.type === 'turn.completed');
    assert.deepEqual(
      completed.map((e: any) => e.data.usage.cost_usd),
      [turn1, turn2],
    );
    assert.equal(completed[1].data.usage.server_tool_use.web_search_requests, 2);

    // The tenant's day counts the same, once (recorded after the commit that showed the session idle).
    const u = await usageOnceCounted(
      h.redis.url,
      h.api,
      `/v1/usage?from=${today()}&to=${today()}`,
      (b) => (b.data[0]?.input_tokens ?? 0) >= 1500,
    );
    assert.equal(u.body.data.length, 1);
    assert.equal(u.body.data[0]!.cost_usd, 0.03235);
    assert.equal(u.body.data[0]!.input_tokens, 1500);
    assert.equal(u.body.data[0]!.cache_creation_input_tokens, 2000);
    assert.equal(u.body.data[0]!.cache_read_input_tokens, 3000);

    const metrics = await (await fetch(`${h.service.url}/metrics`)).text();
    assert.match(metrics, /trs_cost_usd_total\{model_family="claude-sonnet-5-5"\} 0\.03235/);
    assert.match(metrics, /trs_tokens_total\{model_family="claude-sonnet-5-5",kind="cache_read"\} 3000/);
    assert.doesNotMatch(metrics, /trs_cost_usd_total\{[^}]*tenant=/);
  });

  it('a compaction turn is counted too', async () => {
    h.fake.enqueue(text('Hello.', { usage: { input_tokens: 1000, output_tokens: 100 } }));
    const r = await h.api.post('/v1/sessions', { input: 'Hi' });
    await h.api.waitStatus(r.body.id, 'idle');
    // claude-sonnet-5-5: 1000×2 + 100×10 = 3,000 µ$; the compaction 2000×2 + 300×10 = 7,000 µ$.
    h.fake.enqueue(
      reply([{ type: 'compaction', content: 'They said hi.' }], {
        usage: { input_tokens: 2000, output_tokens: 300 },
      }),
    );
    const c = await h.api.post(`/v1/sessions/${r.body.id}/compact`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const done = await h.api.waitFor(r.body.id, (s) => s.status === 'idle' && !s.compaction_pending);
    const iters = (await h.api.get(`/v1/sessions/${r.body.id}/iterations`)).body.data;
    assert.equal(iters.at(-1).kind, 'compaction');
    assert.equal(iters.at(-1).usage.cost_usd, 0.007);
    assert.equal(done.usage.cost_usd, 0.01);
  });

  it('a model without a price: cost_usd null, and a dollar budget is refused with 400 unknown_model_price', async () => {
    h.fake.enqueue(text('Hi.', { usage: { input_tokens: 10, output_tokens: 5 } }));
    const r = await h.api.post('/v1/sessions', { model: 'claude-fake-1', input: 'Hello' });
    assert.equal(r.status, 201);
    const done = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(done.usage.cost_usd, null);
    assert.equal(done.usage.total_tokens, 15);
    const iters = (await h.api.get(`/v1/sessions/${r.body.id}/iterations`)).body.data;
    assert.equal(iters[0].usage.cost_usd, null);

    const b = await h.api.post('/v1/sessions', {
      model: 'claude-fake-1',
      input: 'Hi',
      budget: { cost_usd: 1 },
    });
    assert.equal(b.status, 400);
    assert.equal(b.body.error.code, 'unknown_model_price');
    const p = await h.api.req('PATCH', `/v1/sessions/${r.body.id}`, { budget: { cost_usd: 1 } });
    assert.equal(p.status, 400);
    assert.equal(p.body.error.code, 'unknown_model_price');
    // A priced model from now on does not price the turn already run: a dollar budget still cannot count it.
    const priced = await h.api.req('PATCH', `/v1/sessions/${r.body.id}`, {
      params: { model: 'claude-sonnet-5-5' },
      budget: { cost_usd: 1 },
    });
    assert.equal(priced.status, 400);
    assert.equal(priced.body.error.code, 'unknown_model_price');
    assert.deepEqual(priced.body.error.details, { unpriced_turns: 1 });
    const tokens = await h.api.req('PATCH', `/v1/sessions/${r.body.id}`, { budget: { total_tokens: 100 } });
    assert.equal(tokens.status, 200);

    // A retry that changes the model is checked as a PATCH is: no unpriced turns under a dollar budget.
    h.fake.enqueue(text('Priced.'));
    const c = await h.api.post('/v1/sessions', { input: 'Hi', budget: { cost_usd: 1 } });
    await h.api.waitStatus(c.body.id, 'idle');
    const retry = await h.api.post(`/v1/sessions/${c.body.id}/retry`, { params: { model: 'claude-fake-1' } });
    assert.equal(retry.status, 400);
    assert.equal(retry.body.error.code, 'unknown_model_price');
    assert.equal(h.fake.requests.length, 2, 'nothing sent');

    // A sub-agent's turns count toward its parent's dollar budget: its model, at any depth, needs a price.
    const agent = (model: string, tools: unknown[] = []) => ({
      type: 'agent',
      name: 'helper',
      description: 'Helps.',
      session: { model, tools },
    });
    const nested = await h.api.post('/v1/sessions', {
      start: false,
      budget: { cost_usd: 1 },
      tools: [agent('claude-sonnet-5-5', [agent('claude-fake-1')])],
    });
    assert.equal(nested.status, 400, JSON.stringify(nested.body));
    assert.equal(nested.body.error.code, 'unknown_model_price');
    const free = await h.api.post('/v1/sessions', { start: false, tools: [agent('claude-fake-1')] });
    assert.equal(free.status, 201);
    const budgeted = await h.api.req('PATCH', `/v1/sessions/${free.body.id}`, { budget: { cost_usd: 1 } });
    assert.equal(budgeted.status, 400);
    assert.equal(budgeted.body.error.code, 'unknown_model_price');
    const capped = await h.api.post('/v1/sessions', { start: false, budget: { cost_usd: 1 } });
    const added = await h.api.req('PATCH', `/v1/sessions/${capped.body.id}`, {
      tools: [agent('claude-fake-1')],
    });
    assert.equal(added.status, 400);
    assert.equal(added.body.error.code, 'unknown_model_price');
    const ok = await h.api.req('PATCH', `/v1/sessions/${capped.body.id}`, {
      tools: [agent('claude-sonnet-5-5')],
    });
    assert.equal(ok.status, 200);
  });

  it('a reply a fallback model served is priced as the models that served it, in the session and the day', async () => {
    const day = async () => (await h.api.get(`/v1/usage?from=${today()}&to=${today()}`)).body.data[0];
    const before = await day();
    // claude-opus-5 declined ($5 in, $25 out per MTok): 1000×5 + 10×25 = 5,250 µ$; claude-haiku-4-5 served it ($1,
    // $5): 1000×1 + 200×5 = 2,000 µ$. Priced as the requested model whole it would be 2000×5 + 210×25 = 15,250 µ$.
    h.fake.enqueue(
      text(
        'Served by the fallback.',
        servedByFallback(
          { model: 'claude-haiku-4-5-20251001', usage: { input_tokens: 1000, output_tokens: 200 } },
          [{ model: 'claude-opus-5', usage: { input_tokens: 1000, output_tokens: 10 } }],
        ),
      ),
      // Served by the fallback alone (no declined attempt in its usage), the entry naming no model: the reply's.
      text('Again.', {
        model: 'claude-haiku-4-5',
        usage: {
          input_tokens: 500,
          output_tokens: 100,
          iterations: [
            {
              type: 'fallback_message',
              model: null,
              input_tokens: 500,
              output_tokens: 100,
              cache_creation_input_tokens: 0,
              cache_read_input_tokens: 0,
              cache_creation: null,
            },
          ],
        },
      }),
    );
    const r = await h.api.post('/v1/sessions', {
      params: {
        model: 'claude-opus-5',
        max_tokens: 1024,
        fallbacks: [{ model: 'claude-haiku-4-5' }],
        betas: [SERVER_SIDE_FALLBACK_BETA],
      },
      input: 'Hi',
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await h.api.waitStatus(r.body.id, 'idle');
    assert.deepEqual(h.fake.requests.at(-1)?.body.fallbacks, [{ model: 'claude-haiku-4-5' }]);
    assert.equal((await h.api.post(`/v1/sessions/${r.body.id}/messages`, { text: 'More' })).status, 202);
    const done = await h.api.waitFor(r.body.id, (s) => s.status === 'idle' && s.iteration === 2);
    // The second: 500×1 + 100×5 = 1,000 µ$.
    const iters = (await h.api.get(`/v1/sessions/${r.body.id}/iterations`)).body.data;
    assert.deepEqual(
      iters.map((i: any) => i.usage.cost_usd),
      [0.00725, 0.001],
    );
    assert.equal(done.usage.cost_usd, 0.00825);
    // The day gets the second turn after the commit that showed the session idle.
    const micros = (row: { cost_usd: number }) => Math.round((row.cost_usd - before.cost_usd) * 1e6);
    const after = (
      await usageOnceCounted(h.redis.url, h.api, `/v1/usage?from=${today()}&to=${today()}`, (b) =>
        b.data[0] ? micros(b.data[0]) >= 8250 : false,
      )
    ).body.data[0]!;
    assert.equal(micros(after), 8250);
  });

  it('a dollar ceiling needs a price for every model of params.fallbacks too (400 unknown_model_price)', async () => {
    const fallbacks = (model: string) => ({
      model: 'claude-sonnet-5-5',
      max_tokens: 1024,
      fallbacks: [{ model: 'claude-haiku-4-5' }, { model }],
      betas: [SERVER_SIDE_FALLBACK_BETA],
    });
    const refused = await h.api.post('/v1/sessions', {
      params: fallbacks('claude-fake-1'),
      start: false,
      budget: { cost_usd: 1 },
    });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.equal(refused.body.error.code, 'unknown_model_price');
    assert.deepEqual(refused.body.error.details, { model: 'claude-fake-1' });
    assert.match(refused.body.error.message, /params\.fallbacks/);
    // Priced fallbacks (and the API's own chain, `"default"`) are taken.
    for (const params of [
      fallbacks('claude-sonnet-4-5'),
      { model: 'claude-sonnet-5-5', fallbacks: 'default' },
    ]) {
      const ok = await h.api.post('/v1/sessions', { params, start: false, budget: { cost_usd: 1 } });
      assert.equal(ok.status, 201, JSON.stringify(ok.body));
    }
    // A PATCH that brings one under a budget, or a budget over one.
    const s = await h.api.post('/v1/sessions', { start: false, budget: { cost_usd: 1 } });
    const patched = await h.api.req('PATCH', `/v1/sessions/${s.body.id}`, {
      params: fallbacks('claude-fake-1'),
    });
    assert.equal(patched.status, 400, JSON.stringify(patched.body));
    assert.equal(patched.body.error.code, 'unknown_model_price');
    const free = await h.api.post('/v1/sessions', { params: fallbacks('claude-fake-1'), start: false });
    assert.equal(free.status, 201, JSON.stringify(free.body));
    const budgeted = await h.api.req('PATCH', `/v1/sessions/${free.body.id}`, { budget: { cost_usd: 1 } });
    assert.equal(budgeted.status, 400);
    assert.equal(budgeted.body.error.code, 'unknown_model_price');
    // A sub-agent's, under its parent's budget.
    const nested = await h.api.post('/v1/sessions', {
      start: false,
      budget: { cost_usd: 1 },
      tools: [
        {
          type: 'agent',
          name: 'helper',
          description: 'Helps.',
          session: { params: fallbacks('claude-fake-1') },
        },
      ],
    });
    assert.equal(nested.status, 400, JSON.stringify(nested.body));
    assert.deepEqual(nested.body.error.details, { model: 'claude-fake-1' });
  });

  it('budget.cost_usd stops the run once the dollars are spent', async () => {
    // $0.015 a turn on claude-sonnet-5-5 (1000×2 + 1300×10 µ$).
    const spend = { input_tokens: 1000, output_tokens: 1300 };
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 1 }, { usage: spend }),
      toolCall('calculate_sum', { a: 2, b: 2 }, { usage: spend }),
      toolCall('calculate_sum', { a: 3, b: 3 }, { usage: spend }),
    );
    const r = await h.api.post('/v1/sessions', {
      model: 'claude-sonnet-5-5',
      tools: ['calculate_sum'],
      input: 'Add',
      budget: { cost_usd: 0.02 },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const done = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'budget_exhausted');
    assert.equal(h.fake.requests.length, 2);
    // A paused turn's continuation is another request: not sent once the budget is spent.
    h.fake.reset();
    const paused = () =>
      reply(
        [
          { type: 'text', text: 'Searching.' },
          { type: 'server_tool_use', name: 'web_search', input: { query: 'x' } },
        ],
        { stop_reason: 'pause_turn', usage: spend },
      );
    h.fake.enqueue(paused(), paused(), paused(), text('Found.', { usage: spend }));
    const p = await h.api.post('/v1/sessions', {
      model: 'claude-sonnet-5-5',
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      input: 'Search',
      // $0.025 a turn: $0.015 of tokens and a web search request.
      budget: { cost_usd: 0.04 },
    });
    const pausedDone = await h.api.waitStatus(p.body.id, ['idle', 'failed']);
    assert.equal(pausedDone.stop_reason, 'budget_exhausted');
    assert.equal(h.fake.requests.length, 2);
    // Less than a micro-dollar (the unit it is counted in) would be a budget of nothing: refused.
    const tiny = await h.api.post('/v1/sessions', {
      model: 'claude-sonnet-5-5',
      start: false,
      budget: { cost_usd: 1e-7 },
    });
    assert.equal(tiny.status, 400, JSON.stringify(tiny.body));
    assert.equal(tiny.body.error.code, 'invalid_request');
    assert.equal(done.usage.cost_usd, 0.03);
    assert.equal(done.usage.budget_remaining_cost_usd, 0);
    const m = await h.api.post(`/v1/sessions/${r.body.id}/messages`, { text: 'More' });
    assert.equal(m.status, 409);
    assert.equal(m.body.error.code, 'budget_exhausted');
  });

  it("a turn cancelled mid-stream is billed for what it streamed, in the session and in the tenant's day", async () => {
    const day = async () =>
      (await h.api.get(`/v1/usage?from=${today()}&to=${today()}`)).body.data[0] as Record<string, number>;
    const before = await day();
    h.fake.enqueue(
      text('word '.repeat(600), {
        eventDelayMs: 20,
        usage: {
          input_tokens: 4000,
          output_tokens: 900,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 1000,
        },
      }),
    );
    const r = await h.api.post('/v1/sessions', {
      model: 'claude-sonnet-5-5-20260901',
      input: 'Write at length',
      stream: true,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    await until(
      async () =>
        (await h.api.get(`/v1/sessions/${id}/events?limit=500`)).body.data.some(
          (e: any) => e.type === 'stream.event' && e.data.event.type === 'content_block_delta',
        ),
      20_000,
      'a delta streamed',
    );
    assert.equal((await h.api.post(`/v1/sessions/${id}/cancel`)).status, 200);
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'cancelled');
    // What message_start said it used (the output so far: its 1 token): 4000×2 + 1×10 + 1000×0.2 = 8,210 µ$.
    assert.equal(done.usage.input_tokens, 4000);
    assert.equal(done.usage.cache_read_input_tokens, 1000);
    assert.equal(done.usage.output_tokens, 1);
    assert.equal(done.usage.cost_usd, 0.00821);
    // The day gets the cancel's bill after the commit that showed the session idle.
    const after = (
      await usageOnceCounted(
        h.redis.url,
        h.api,
        `/v1/usage?from=${today()}&to=${today()}`,
        (b) => (b.data[0]?.input_tokens ?? 0) - before['input_tokens']! >= 4000,
      )
    ).body.data[0] as unknown as Record<string, number>;
    assert.equal(after['input_tokens']! - before['input_tokens']!, 4000);
    assert.equal(Math.round((after['cost_usd']! - before['cost_usd']!) * 1e6), 8210);
  });

  it('GET /v1/usage: bounded, validated ranges', async () => {
    for (const q of [
      'from=2026-02-30',
      'to=yesterday',
      'from=2026-05-02&to=2026-05-01',
      'from=2024-01-01&to=2026-01-01',
      'x=1',
    ]) {
      const r = await h.api.get(`/v1/usage?${q}`);
      assert.equal(r.status, 400, q);
      assert.equal(r.body.error.code, 'invalid_request', q);
      // Every refusal's details are the list of issues naming the parameter, the range's as the schema's.
      assert.ok(Array.isArray(r.body.error.details), `${q}: ${JSON.stringify(r.body.error)}`);
      assert.match(r.body.error.details[0].path, /^\/(from|to|x)?$/, q);
    }
    const r = await h.api.get('/v1/usage?from=2026-01-01&to=2026-01-03');
    assert.equal(r.status, 200);
    assert.deepEqual(
      r.body.data.map((d: any) => [d.date, d.cost_usd]),
      [
        ['2026-01-01', 0],
        ['2026-01-02', 0],
        ['2026-01-03', 0],
      ],
    );
    // The last days a date can name: the range ends at `to` (it once went on past year 9999 without end).
    const end = await h.api.get('/v1/usage?from=9999-12-30&to=9999-12-31');
    assert.equal(end.status, 200);
    assert.deepEqual(
      end.body.data.map((d: any) => d.date),
      ['9999-12-30', '9999-12-31'],
    );
  });

  it('GET /v1/usage is a read: it answers while Redis refuses writes (maxmemory reached)', async () => {
    const admin = new Redis(h.redis.url);
    try {
      const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1]);
      // Below what is in use: every write is refused (OOM), reads are answered. Redis refuses MULTI then too.
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      await admin.config('SET', 'maxmemory', String(Math.max(1, used - 4096)));
      const r = await h.api.get('/v1/usage?from=2026-01-01&to=2026-01-02');
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.data.length, 2);
    } finally {
      await admin.config('SET', 'maxmemory', '0');
      admin.disconnect();
    }
  });
});

describe('cost: a model MODEL_PRICES prices by the id a session names', () => {
  const arn = 'arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3d4e5f6';
  let h: Harness;
  before(async () => {
    h = await startHarness({
      env: {
        TENANT_MAX_COST_USD_PER_DAY: '1',
        MODEL_PRICES: JSON.stringify({
          [arn]: { input: 1, output: 5 },
          'anthropic.claude-fake-2': { input: 2, output: 10 },
        }),
      },
    });
  });
  after(async () => h.close());

  it('an application inference profile ARN, and an id given with its provider prefix, run under the cap, priced', async () => {
    for (const [model, cost] of [
      // 1000×1 + 200×5 = 2,000 µ$.
      [arn, 0.002],
      // Looked up without its prefix, as the key is read: 1000×2 + 200×10 = 4,000 µ$.
      ['anthropic.claude-fake-2-20260101', 0.004],
    ] as const) {
      h.fake.enqueue(text('Hi.', { usage: { input_tokens: 1000, output_tokens: 200 } }));
      const r = await h.api.post('/v1/sessions', { model, input: 'Hi' });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const done = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
      assert.equal(done.usage.cost_usd, cost, model);
      assert.equal(h.fake.requests.at(-1)?.body.model, model);
    }
    // The last turn reaches the day after the commit that showed its session idle.
    const usage = await usageOnceCounted(h.redis.url, h.api, '/v1/usage', (b) => b.cost_usd >= 0.006);
    assert.equal(usage.body.cost_usd, 0.006);
  });
});

describe('cost: TENANT_MAX_COST_USD_PER_DAY', () => {
  let h: Harness;
  const capEnv = {
    API_KEYS: 'a:key-a,b:key-b,c:key-c',
    TENANT_MAX_COST_USD_PER_DAY: '0.02',
    METRICS_TENANT_LABEL: 'true',
  };
  const spend = { input_tokens: 1000, output_tokens: 1300 }; // $0.015 on claude-sonnet-5-5
  before(async () => {
    h = await startHarness({ env: capEnv });
  });
  after(async () => h.close());

  it('a tenant over its daily cap is stopped before the next request, refused new runs; another tenant is not', async () => {
    const a = h.api.as('key-a');
    const b = h.api.as('key-b');
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 1 }, { usage: spend }),
      toolCall('calculate_sum', { a: 2, b: 2 }, { usage: spend }),
      toolCall('calculate_sum', { a: 3, b: 3 }, { usage: spend }),
    );
    const s = await a.post('/v1/sessions', {
      model: 'claude-sonnet-5-5',
      tools: ['calculate_sum'],
      input: 'Add',
    });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    const done = await a.waitStatus(s.body.id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'tenant_budget_exhausted');
    // $0.015 after turn 1 (under $0.02): turn 2 sent; $0.03 after it: no third request.
    assert.equal(h.fake.requests.length, 2);
    const msgs = (await a.get(`/v1/sessions/${s.body.id}/messages`)).body.data;
    assert.equal(msgs.at(-1).content[0].type, 'tool_result', "stopped after the turn's tool results");

    const m = await a.post(`/v1/sessions/${s.body.id}/messages`, { text: 'More' });
    assert.equal(m.status, 429);
    assert.equal(m.body.error.code, 'quota_exceeded');
    assert.equal(m.body.error.details.quota, 'cost_usd_per_day');
    const c = await a.post('/v1/sessions', { model: 'claude-sonnet-5-5', input: 'Hi' });
    assert.equal(c.status, 429);
    assert.equal(c.body.error.details.quota, 'cost_usd_per_day');
    const cont = await a.post(`/v1/sessions/${s.body.id}/continue`);
    assert.equal(cont.status, 429);
    // Another replica on the same Redis counts the same day.
    const replica2 = await startHarness({ redis: h.redis, fakeServer: h.fake, env: capEnv });
    try {
      const again = await replica2.api
        .as('key-a')
        .post('/v1/sessions', { model: 'claude-sonnet-5-5', input: 'Hi' });
      assert.equal(again.status, 429);
      assert.equal(again.body.error.details.quota, 'cost_usd_per_day');
    } finally {
      await replica2.close();
    }

    // Another tenant's day is its own.
    h.fake.reset();
    h.fake.enqueue(text('Fine.', { usage: spend }));
    const other = await b.post('/v1/sessions', { model: 'claude-sonnet-5-5', input: 'Hi' });
    assert.equal(other.status, 201, JSON.stringify(other.body));
    const ok = await b.waitStatus(other.body.id, ['idle', 'failed']);
    assert.equal(ok.stop_reason, 'end_turn');
    assert.equal(h.fake.requests.length, 1);

    // With a cap, a model without a price cannot run; nor can one that may fall back to such a model.
    const u = await b.post('/v1/sessions', { model: 'claude-fake-1', input: 'Hi' });
    assert.equal(u.status, 400);
    assert.equal(u.body.error.code, 'unknown_model_price');
    const f = await b.post('/v1/sessions', {
      params: {
        model: 'claude-sonnet-5-5',
        max_tokens: 1024,
        fallbacks: [{ model: 'claude-fake-1' }],
        betas: [SERVER_SIDE_FALLBACK_BETA],
      },
      input: 'Hi',
    });
    assert.equal(f.status, 400, JSON.stringify(f.body));
    assert.equal(f.body.error.code, 'unknown_model_price');
    assert.deepEqual(f.body.error.details, { model: 'claude-fake-1' });

    const usageA = (await a.get('/v1/usage')).body;
    assert.equal(usageA.cost_usd, 0.03);
    // b's turn reaches its day after the commit that showed its session idle (a's were in before its stop).
    const usageB = (await usageOnceCounted(h.redis.url, b, '/v1/usage', (u) => u.cost_usd >= 0.015)).body;
    assert.equal(usageB.cost_usd, 0.015);
    const metrics = await (await fetch(`${h.service.url}/metrics`)).text();
    assert.match(metrics, /trs_cost_usd_total\{model_family="claude-sonnet-5-5",tenant="a"\} 0\.03/);
  });

  it('a session of a model without a price, made before the cap was set, starts no run under it', async () => {
    // A replica without the cap (the service as it was configured before) makes the session.
    const uncapped = await startHarness({
      redis: h.redis,
      fakeServer: h.fake,
      env: { API_KEYS: capEnv.API_KEYS },
    });
    try {
      h.fake.enqueue(text('Hello.'));
      const made = await uncapped.api
        .as('key-c')
        .post('/v1/sessions', { model: 'claude-fake-1', input: 'Hi' });
      assert.equal(made.status, 201);
      await uncapped.api.as('key-c').waitStatus(made.body.id, 'idle');
      const sent = h.fake.requests.length;
      const r = await h.api.as('key-c').post(`/v1/sessions/${made.body.id}/messages`, { content: 'Hi' });
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(r.body.error.code, 'unknown_model_price');
      // A retry of its reply too, with params or without.
      for (const body of [{}, { params: { max_tokens: 100 } }]) {
        const retry = await h.api.as('key-c').post(`/v1/sessions/${made.body.id}/retry`, body);
        assert.equal(retry.status, 400, JSON.stringify(retry.body));
        assert.equal(retry.body.error.code, 'unknown_model_price');
      }
      assert.equal((await h.api.as('key-c').get(`/v1/sessions/${made.body.id}`)).body.status, 'idle');
      assert.equal(h.fake.requests.length, sent);

      // A reviewed reply without calls: `continue` ends the run with it and sends nothing, so nothing is priced.
      h.fake.enqueue(text('Reviewed.'));
      const review = await uncapped.api
        .as('key-c')
        .post('/v1/sessions', { model: 'claude-fake-1', input: 'Hi', pause_after_turn: true });
      assert.equal(review.status, 201, JSON.stringify(review.body));
      await uncapped.api.as('key-c').waitStatus(review.body.id, 'requires_action');
      const before = h.fake.requests.length;
      const go = await h.api.as('key-c').post(`/v1/sessions/${review.body.id}/continue`, {});
      assert.equal(go.status, 202, JSON.stringify(go.body));
      const ended = await h.api.as('key-c').waitStatus(review.body.id, ['idle', 'failed']);
      assert.deepEqual([ended.status, ended.stop_reason], ['idle', 'end_turn']);
      assert.equal(h.fake.requests.length, before);

      // With a follow-up queued while the reviewed turn ran, `continue` sends it next: priced as any run.
      h.fake.enqueue(text('Reviewed again.', { pauseAfterEvents: 2 }));
      const sentBefore = h.fake.requests.length;
      const queued = await uncapped.api
        .as('key-c')
        .post('/v1/sessions', { model: 'claude-fake-1', input: 'Hi', pause_after_turn: true });
      await h.fake.waitForRequests(sentBefore + 1);
      const follow = await uncapped.api
        .as('key-c')
        .post(`/v1/sessions/${queued.body.id}/messages`, { text: 'and also this' });
      assert.equal(follow.status, 202, JSON.stringify(follow.body));
      h.fake.resume();
      await uncapped.api.as('key-c').waitStatus(queued.body.id, 'requires_action');
      const refused = await h.api.as('key-c').post(`/v1/sessions/${queued.body.id}/continue`, {});
      assert.equal(refused.status, 400, JSON.stringify(refused.body));
      assert.equal(refused.body.error.code, 'unknown_model_price');
      assert.equal(h.fake.requests.length, sentBefore + 1, 'nothing sent');
    } finally {
      await uncapped.close();
    }
  });

  it('an on_max_tokens retry is a model request the cap is checked before', async () => {
    h.fake.reset();
    const cut = () => text('Cut', { stop_reason: 'max_tokens', usage: spend });
    h.fake.enqueue(cut(), cut(), cut(), cut(), cut());
    const s = await h.api.as('key-c').post('/v1/sessions', {
      model: 'claude-sonnet-5-5',
      max_tokens: 100,
      on_max_tokens: { retry: 'double', ceiling: 1600 },
      input: 'Write',
    });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    const done = await h.api.as('key-c').waitStatus(s.body.id, ['idle', 'failed']);
    // $0.015 after the first request: a retry; $0.03 after it: no third.
    assert.equal(h.fake.requests.length, 2);
    assert.equal(done.stop_reason, 'max_tokens');
  });
});
