import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { validateConversation } from '../fake/server.js';

describe('iterations, max_iterations and usage', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('max_iterations stops the run idle with stop_reason max_iterations and a valid history ending in tool results', async () => {
    // The model would call tools forever.
    h.fake.setHandler((req) => {
      const n = req.messages.filter((m) => m.role === 'assistant').length;
      return toolCall('calculate_sum', { a: n, b: 10 });
    });
    const created = await h.api.post('/v1/sessions', {
      input: 'Loop',
      tools: ['calculate_sum'],
      max_iterations: 2,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    const s = await h.api.waitStatus(id, ['idle', 'failed', 'requires_action']);
    assert.equal(s.status, 'idle', JSON.stringify(s));
    assert.equal(s.stop_reason, 'max_iterations');
    assert.equal(s.iteration, 2);
    assert.equal(s.required_action, null);
    assert.equal(h.fake.requests.length, 2, 'no third turn is sent');
    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body;
    assert.deepEqual(
      msgs.data.map((m: any) => m.role),
      ['user', 'assistant', 'user', 'assistant', 'user'],
    );
    assert.deepEqual(msgs.pending_tool_calls, []);
    const last = msgs.data.at(-1);
    assert.deepEqual(
      last.content.map((b: any) => [b.type, b.content]),
      [['tool_result', '11']],
    );
    assert.equal(last.content[0].tool_use_id, msgs.data[3].content[0].id);
    assert.doesNotThrow(() => validateConversation(msgs.data, true));

    // A follow-up starts a new run with a fresh budget; it joins the trailing tool-results turn.
    h.fake.setHandler(() => text('Stopping here.'));
    const sent = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Enough, summarise.' });
    assert.equal(sent.status, 202, JSON.stringify(sent.body));
    const s2 = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(s2.status, 'idle', JSON.stringify(s2.error));
    assert.equal(s2.stop_reason, 'end_turn');
    assert.equal(s2.iteration, 3);
    const sentToModel: any[] = h.fake.requests[2]!.messages;
    assert.equal(sentToModel.length, 5);
    assert.deepEqual(sentToModel.at(-1).content.at(-1), { type: 'text', text: 'Enough, summarise.' });
    assert.equal(sentToModel.at(-1).content[0].type, 'tool_result');
    assert.doesNotThrow(() => validateConversation(sentToModel, true));
  });

  it('a run that ends on its last allowed turn stops with end_turn, not max_iterations', async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 1, b: 1 }), text('Done in two.'));
    const created = await h.api.post('/v1/sessions', {
      input: 'x',
      tools: ['calculate_sum'],
      max_iterations: 2,
    });
    const s = await h.api.waitStatus(created.body.id, ['idle', 'failed']);
    assert.equal(s.stop_reason, 'end_turn');
    assert.equal(s.iteration, 2);
  });

  it('usage totals are the sum of the iterations; iteration records hold the reply, tool results and usage', async () => {
    const usages = [
      { input_tokens: 101, output_tokens: 11, cache_creation_input_tokens: 50, cache_read_input_tokens: 0 },
      { input_tokens: 202, output_tokens: 22, cache_creation_input_tokens: 0, cache_read_input_tokens: 50 },
      { input_tokens: 303, output_tokens: 33, cache_creation_input_tokens: 7, cache_read_input_tokens: 60 },
    ];
    h.fake.enqueue(
      toolCall('get_weather', { location: 'Lima' }, { id: 'toolu_w', usage: usages[0] }),
      toolCalls(
        [
          toolUse('calculate_sum', { a: 1, b: 2 }, 'toolu_s1'),
          toolUse('calculate_sum', { a: 3, b: 4 }, 'toolu_s2'),
        ],
        { preamble: 'Two sums.', usage: usages[1] },
      ),
      text('All done.', { usage: usages[2] }),
    );
    const created = await h.api.post('/v1/sessions', {
      input: 'Weather and sums',
      tools: ['get_weather', 'calculate_sum'],
      system: 'Be brief.',
      max_tokens: 777,
    });
    const id = created.body.id;
    const s = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(s.iteration, 3);
    const total = {
      input_tokens: 606,
      output_tokens: 66,
      cache_creation_input_tokens: 57,
      cache_read_input_tokens: 110,
    };
    assert.deepEqual(s.usage, {
      ...total,
      total_tokens: 606 + 66 + 57 + 110,
      budget_total_tokens: null,
      budget_remaining_tokens: null,
      // At the list prices of the default model (claude-sonnet-5-5), each turn rounded to the micro-dollar.
      cost_usd: 0.002037,
      server_tool_use: {},
      budget_cost_usd: null,
      budget_remaining_cost_usd: null,
      children: {
        input_tokens: 0,
        output_tokens: 0,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        total_tokens: 0,
        cost_usd: 0,
      },
    });

    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const list = (await h.api.get(`/v1/sessions/${id}/iterations`)).body.data;
    assert.equal(list.length, 3);
    const summed = Object.fromEntries(
      Object.keys(total).map((k) => [k, list.reduce((a: number, r: any) => a + r.usage[k], 0)]),
    );
    assert.deepEqual(summed, total, 'the session total is the sum of the records');

    for (let n = 1; n <= 3; n++) {
      const r = await h.api.get(`/v1/sessions/${id}/iterations/${n}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const rec = r.body;
      const req = h.fake.requests[n - 1]!;
      assert.equal(rec.iteration, n);
      const { cost_usd, server_tool_use, ...tokens } = rec.usage;
      assert.deepEqual(tokens, usages[n - 1]);
      assert.equal(typeof cost_usd, 'number');
      assert.deepEqual(server_tool_use, {});
      assert.equal(rec.request.model, req.body.model);
      assert.equal(rec.request.max_tokens, 777);
      assert.equal(req.body.max_tokens, 777);
      assert.equal(req.system, 'Be brief.');
      assert.equal(rec.request.message_count, req.messages.length);
      assert.equal(rec.reply_index, req.messages.length);
      assert.deepEqual(rec.reply, msgs[rec.reply_index]);
      assert.equal(rec.reply.role, 'assistant');
      assert.ok(!Number.isNaN(Date.parse(rec.started_at)) && !Number.isNaN(Date.parse(rec.completed_at)));
      assert.ok(Date.parse(rec.completed_at) >= Date.parse(rec.started_at));
      assert.deepEqual(rec, { ...list[n - 1], reply: rec.reply, tool_results: rec.tool_results });
      if (n < 3) {
        assert.equal(rec.stop_reason, 'tool_use');
        assert.equal(rec.results_index, rec.reply_index + 1);
        assert.deepEqual(rec.tool_results, msgs[rec.results_index]);
        assert.deepEqual(rec.tool_results, h.fake.requests[n]!.messages.at(-1), 'what the model got next');
      } else {
        assert.equal(rec.stop_reason, 'end_turn');
        assert.equal(rec.results_index, null);
        assert.equal(rec.tool_results, null);
        assert.deepEqual(rec.tool_calls, []);
      }
    }
    const two = (await h.api.get(`/v1/sessions/${id}/iterations/2`)).body;
    assert.deepEqual(two.tool_calls, [
      { id: 'toolu_s1', name: 'calculate_sum' },
      { id: 'toolu_s2', name: 'calculate_sum' },
    ]);
    assert.deepEqual(
      two.tool_results.content.map((b: any) => [b.tool_use_id, b.content]),
      [
        ['toolu_s1', '3'],
        ['toolu_s2', '7'],
      ],
    );
    assert.equal(two.reply.content[0].text, 'Two sums.');
    const missing = await h.api.get(`/v1/sessions/${id}/iterations/4`);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error.code, 'iteration_not_found');
  });
});
