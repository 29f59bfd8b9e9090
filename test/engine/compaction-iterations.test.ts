/**
 * `iteration` counts model turns only (contract §2: "model turns completed"); a compaction is a record of its own,
 * counted in `compactions`. The records are one list, turns and compactions in order, numbered `n` from 1: that
 * number is what `GET …/iterations/:n`, `at_iteration` of fork and of the compacted segments address, so fork and
 * retry reach the right record with a compaction in between, and `max_iterations` is not spent by compactions.
 */
import '../helpers/test-tools-env.js';
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { text, toolCall } from '../fake/server.js';
import { startHarness, type Harness } from '../helpers/service.js';

const allText = (m: { content: unknown } | undefined): string =>
  Array.isArray(m?.content)
    ? (m.content as Array<{ type: string; text?: string }>)
        .map((b) => (b.type === 'text' ? b.text : ''))
        .join('')
    : String(m?.content ?? '');

describe('iterations: model turns, compactions and record numbers', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  async function create(body: Record<string, unknown>) {
    const r = await h.api.post('/v1/sessions', body);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  }
  const records = async (id: string) => (await h.api.get(`/v1/sessions/${id}/iterations`)).body.data as any[];
  const events = async (id: string) =>
    (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as Array<{ type: string; data: any }>;
  /** Requests of model turns (a compaction request has `compaction` in its body). */
  const turnRequests = () => h.fake.requests.filter((r) => !r.body.compaction);

  test('a compaction between two turns: iteration 2, compactions 1, three numbered records; /iterations/:n, events, fork and retry address records by number', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let turns = 0;
    h.fake.setHandler(async () => {
      turns++;
      if (turns === 1) {
        await gate;
        return toolCall('calculate_sum', { a: 2, b: 3 });
      }
      return text(`The sum is 5 (answer ${turns}).`);
    });
    const s = await create({ input: 'What is 2 plus 3?', tools: ['calculate_sum'] });
    assert.equal(s.iteration, 0);
    assert.equal(s.compactions, 0);
    await h.fake.waitForRequests(1);
    assert.equal((await h.api.post(`/v1/sessions/${s.id}/compact`)).status, 202);
    release();
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(h.fake.requests.length, 3);

    // The session counts model turns; compactions apart.
    assert.equal(done.iteration, 2);
    assert.equal(done.compactions, 1);
    const recs = await records(s.id);
    assert.deepEqual(
      recs.map((r) => [r.n, r.kind ?? 'turn', r.iteration]),
      [
        [1, 'turn', 1],
        [2, 'compaction', 1],
        [3, 'turn', 2],
      ],
    );
    // GET …/iterations/:n is record n.
    const second = await h.api.get(`/v1/sessions/${s.id}/iterations/2`);
    assert.equal(second.status, 200);
    assert.equal(second.body.n, 2);
    assert.equal(second.body.kind, 'compaction');
    assert.equal(second.body.reply.content[0].type, 'compaction');
    const third = await h.api.get(`/v1/sessions/${s.id}/iterations/3`);
    assert.equal(third.body.n, 3);
    assert.equal(third.body.iteration, 2);
    assert.equal(allText(third.body.reply), 'The sum is 5 (answer 2).');
    const beyond = await h.api.get(`/v1/sessions/${s.id}/iterations/4`);
    assert.equal(beyond.status, 404);
    assert.equal(beyond.body.error.code, 'iteration_not_found');
    // The segment names its compaction's record.
    const msgs = await h.api.get(`/v1/sessions/${s.id}/messages?include=compacted`);
    assert.deepEqual(
      msgs.body.compacted.map((g: { at_iteration: number }) => g.at_iteration),
      [2],
    );

    // Events: turns carry model turn numbers; each record is persisted with its number.
    const evs = await events(s.id);
    assert.deepEqual(
      evs.filter((e) => e.type === 'turn.started').map((e) => e.data.iteration),
      [1, 2],
    );
    assert.deepEqual(
      evs
        .filter((e) => e.type === 'iteration.persisted')
        .map((e) => [e.data.iteration, e.data.n, e.data.kind ?? 'turn']),
      [
        [1, 1, 'turn'],
        [1, 2, 'compaction'],
        [2, 3, 'turn'],
      ],
    );
    const completed = evs.find((e) => e.type === 'compaction.completed')!;
    assert.deepEqual([completed.data.iteration, completed.data.n], [1, 2]);

    // Fork at record 1: turn 1 and its results, before the compaction.
    const f1 = await h.api.post(`/v1/sessions/${s.id}/fork`, { at_iteration: 1 });
    assert.equal(f1.status, 201, JSON.stringify(f1.body));
    assert.deepEqual([f1.body.iteration, f1.body.compactions], [1, 0]);
    const f1msgs = (await h.api.get(`/v1/sessions/${f1.body.id}/messages`)).body.data;
    assert.deepEqual(
      f1msgs.map((m: { role: string }) => m.role),
      ['user', 'assistant', 'user'],
    );
    assert.equal(f1msgs[2].content[0].type, 'tool_result');
    assert.equal((await records(f1.body.id)).length, 1);
    // Fork at record 3, the last: everything, the compaction included.
    const f3 = await h.api.post(`/v1/sessions/${s.id}/fork`, { at_iteration: 3 });
    assert.equal(f3.status, 201, JSON.stringify(f3.body));
    assert.deepEqual([f3.body.iteration, f3.body.compactions], [2, 1]);
    assert.deepEqual(
      (await h.api.get(`/v1/sessions/${f3.body.id}/messages`)).body.data,
      (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data,
    );
    assert.deepEqual(
      (await records(f3.body.id)).map((r) => [r.n, r.kind ?? 'turn', r.iteration]),
      recs.map((r) => [r.n, r.kind ?? 'turn', r.iteration]),
    );
    // Beyond the last record: 404, with both counts.
    const f4 = await h.api.post(`/v1/sessions/${s.id}/fork`, { at_iteration: 4 });
    assert.equal(f4.status, 404);
    assert.equal(f4.body.error.code, 'iteration_not_found');
    assert.equal(f4.body.error.details.records, 3);

    // Retry drops record 3 (turn 2), not the compaction, and sends turn 2 again from the summary.
    const before = h.fake.requests.length;
    const r = await h.api.post(`/v1/sessions/${s.id}/retry`, {});
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const retried = await h.api.waitFor(s.id, (x) => x.status === 'idle' && h.fake.requests.length > before);
    assert.deepEqual([retried.iteration, retried.compactions], [2, 1]);
    const again = h.fake.requests.at(-1)!;
    assert.equal(again.body.compaction, undefined);
    assert.equal((again.messages[0]!.content as Array<{ type: string }>)[0]!.type, 'compaction');
    const after = await records(s.id);
    assert.deepEqual(
      after.map((x) => [x.n, x.kind ?? 'turn', x.iteration]),
      [
        [1, 'turn', 1],
        [2, 'compaction', 1],
        [3, 'turn', 2],
      ],
    );
    const latest = await h.api.get(`/v1/sessions/${s.id}/iterations/3`);
    assert.equal(allText(latest.body.reply), 'The sum is 5 (answer 3).');
    const dropped = (await events(s.id)).filter((e) => e.type === 'turn.dropped');
    assert.deepEqual(
      dropped.map((e) => [e.data.iteration, e.data.reason]),
      [[2, 'retry']],
    );
  });

  test('max_iterations counts model turns: the compactions between them do not use it up, in a run and after continue', async () => {
    // The model calls a tool every turn; the policy compacts after every turn.
    h.fake.setHandler(async () => toolCall('calculate_sum', { a: 1, b: 2 }));
    const s = await create({
      input: 'Keep adding.',
      tools: ['calculate_sum'],
      max_iterations: 2,
      compaction: { at_input_tokens: 1 },
    });
    const stopped = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(stopped.status, 'idle', JSON.stringify(stopped.error));
    assert.equal(stopped.stop_reason, 'max_iterations');
    assert.equal(turnRequests().length, 2, 'two model turns, as max_iterations says');
    assert.equal(stopped.iteration, 2);
    assert.equal(stopped.compactions, 1, 'one compaction, between the two turns');
    assert.deepEqual(
      (await records(s.id)).map((r) => r.kind ?? 'turn'),
      ['turn', 'compaction', 'turn'],
    );

    // A fresh budget of two model turns: the compaction the last turn called for goes first, then one between.
    const c = await h.api.post(`/v1/sessions/${s.id}/continue`, {});
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const again = await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration > 2);
    assert.equal(again.stop_reason, 'max_iterations');
    assert.equal(turnRequests().length, 4);
    assert.equal(again.iteration, 4);
    assert.equal(again.compactions, 3);
    const recs = await records(s.id);
    assert.deepEqual(
      recs.map((r) => [r.n, r.kind ?? 'turn', r.iteration]),
      [
        [1, 'turn', 1],
        [2, 'compaction', 1],
        [3, 'turn', 2],
        [4, 'compaction', 2],
        [5, 'turn', 3],
        [6, 'compaction', 3],
        [7, 'turn', 4],
      ],
    );
    // Every turn's calls were answered in their own record (the results index of record n, not of record `iteration`).
    for (const r of recs.filter((x) => x.kind === undefined))
      assert.notEqual(r.results_index, null, `record ${r.n}`);
  });
  test('a tool step after a compaction fills in its own record: approved calls of turns 1 and 2 answered in records 1 and 3', async () => {
    let turns = 0;
    h.fake.setHandler(async () => {
      turns++;
      return turns <= 2 ? toolCall('calculate_sum', { a: turns, b: 1 }) : text('Done.');
    });
    // Every call waits for approval (its reply is committed alone; the tool step of the next run fills in the
    // record's results); the policy compacts before each next turn.
    const s = await create({
      input: 'Add twice.',
      tools: ['calculate_sum'],
      approval: 'always',
      compaction: { at_input_tokens: 1 },
    });
    for (let round = 1; round <= 2; round++) {
      const waiting = await h.api.waitFor(
        s.id,
        (x) => x.status === 'requires_action' && x.iteration === round,
      );
      const callId = waiting.required_action.tool_calls[0].id;
      const d = await h.api.post(`/v1/sessions/${s.id}/tool-calls/${callId}`, { decision: 'approve' });
      assert.equal(d.status, 202, JSON.stringify(d.body));
    }
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.deepEqual([done.iteration, done.compactions], [3, 2]);
    const recs = await records(s.id);
    assert.deepEqual(
      recs.map((r) => [r.n, r.kind ?? 'turn', r.iteration]),
      [
        [1, 'turn', 1],
        [2, 'compaction', 1],
        [3, 'turn', 2],
        [4, 'compaction', 2],
        [5, 'turn', 3],
      ],
    );
    // Each turn's results are in its own record; the compactions' records are as they were committed.
    for (const n of [1, 3]) {
      const r = await h.api.get(`/v1/sessions/${s.id}/iterations/${n}`);
      assert.notEqual(r.body.results_index, null, `record ${n}`);
      assert.equal(r.body.tool_results.content[0].type, 'tool_result', `record ${n}`);
      assert.equal(r.body.tool_results.content[0].tool_use_id, r.body.tool_calls[0].id, `record ${n}`);
    }
    for (const r of recs.filter((x) => x.kind === 'compaction')) assert.equal(r.results_index, null);
    const persisted = (await events(s.id))
      .filter((e) => e.type === 'iteration.persisted')
      .map((e) => [e.data.iteration, e.data.n]);
    assert.deepEqual(persisted, [
      [1, 1],
      [1, 2],
      [2, 3],
      [2, 4],
      [3, 5],
    ]);
  });
});
