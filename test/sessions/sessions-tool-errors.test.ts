import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { validateConversation } from '../fake/server.js';

describe('a throwing tool', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  for (const stream of [true, false]) {
    it(`becomes an is_error result that is exactly what the model gets next; the run goes on (stream: ${stream})`, async () => {
      h.fake.enqueue(
        toolCalls([
          toolUse('evaluate_expression', { expression: '1/0' }, 'toolu_div'),
          toolUse('get_weather', { location: 42 }, 'toolu_bad_input'),
          toolUse('calculate_sum', { a: 2, b: 3 }, 'toolu_ok'),
          toolUse('current_time', { timezone: 'Mars/Olympus_Mons' }, 'toolu_tz'),
        ]),
        toolCall('evaluate_expression', { expression: '2 * (3 + 4)' }, { id: 'toolu_fine' }),
        text('Done despite errors.'),
      );
      const created = await h.api.post('/v1/sessions', {
        input: 'Break things',
        tools: ['evaluate_expression', 'get_weather', 'calculate_sum', 'current_time'],
        stream,
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.id;
      const done = await h.api.waitStatus(id, ['idle', 'failed', 'requires_action']);
      assert.equal(done.status, 'idle', JSON.stringify(done));
      assert.equal(done.stop_reason, 'end_turn');
      assert.equal(done.error, null);
      assert.equal(done.iteration, 3);
      assert.equal(h.fake.requests.length, 3);

      const results: any = h.fake.requests[1]!.messages.at(-1);
      assert.equal(results.role, 'user');
      const byId = new Map<string, any>(results.content.map((b: any) => [b.tool_use_id, b]));
      assert.deepEqual(
        results.content.map((b: any) => b.tool_use_id),
        ['toolu_div', 'toolu_bad_input', 'toolu_ok', 'toolu_tz'],
        "the model's order",
      );
      assert.deepEqual(byId.get('toolu_div'), {
        type: 'tool_result',
        tool_use_id: 'toolu_div',
        content: 'Error: Division by zero at position 2',
        is_error: true,
      });
      const bad = byId.get('toolu_bad_input');
      assert.equal(bad.is_error, true, 'input failing zod is an error result');
      assert.match(JSON.stringify(bad.content), /location/);
      assert.deepEqual(byId.get('toolu_ok'), { type: 'tool_result', tool_use_id: 'toolu_ok', content: '5' });
      const tz = byId.get('toolu_tz');
      assert.equal(tz.is_error, true);
      assert.match(JSON.stringify(tz.content), /Unknown time zone/);

      // what the model got is what is stored, and what the iteration record and the events say
      const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
      assert.deepEqual(msgs[2], results);
      assert.deepEqual(msgs.slice(0, -1), h.fake.requests[2]!.messages);
      assert.doesNotThrow(() => validateConversation(msgs, true));
      const rec = (await h.api.get(`/v1/sessions/${id}/iterations/1`)).body;
      assert.deepEqual(rec.tool_results, results);
      assert.deepEqual(h.fake.requests[2]!.messages.at(-1)?.content, [
        { type: 'tool_result', tool_use_id: 'toolu_fine', content: '14' },
      ]);
    });
  }

  it('a call of a tool the session does not have gets an is_error result, and the run goes on', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('get_weather', { location: 'Paris' }, 'toolu_undeclared'),
        toolUse('calculate_sum', { a: 1, b: 1 }, 'toolu_sum'),
      ]),
      text('ok'),
    );
    const created = await h.api.post('/v1/sessions', { input: 'x', tools: ['calculate_sum'] });
    const done = await h.api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action']);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const results: any = h.fake.requests[1]!.messages.at(-1)?.content;
    assert.equal(results[0].tool_use_id, 'toolu_undeclared');
    assert.equal(results[0].is_error, true);
    assert.deepEqual(results[1], { type: 'tool_result', tool_use_id: 'toolu_sum', content: '2' });
  });
});
