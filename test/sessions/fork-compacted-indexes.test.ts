import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { text } from '../fake/script.js';

/**
 * A fork's iteration records keep the source's message indexes (whole-record indexes: the segments, then the
 * history), so the fork's `msg_base` must be the whole-record index of the first message it copies. It was never
 * written (read as 0): `GET …/iterations/:n` of a fork of a compacted session read the wrong message or none
 * (`reply: null`), and its chat ids were not the source's. Records whose messages the fork did not copy (before the
 * summary it starts from, docs/API.md "fork") answer `reply` null, also after the fork compacts in its turn.
 */

type Rec = { n: number; reply: unknown; tool_results: unknown; reply_index: number };
type ChatMessage = { id: string };

describe('a fork of a compacted session', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let h: Harness;
  before(async () => {
    redis = await startTestRedis({ appendonly: false });
    h = await startHarness({ redis });
  });
  after(async () => {
    await h?.close();
    await redis?.stop();
  });

  async function turn(id: string, n: number): Promise<void> {
    h.fake.enqueue(text(`Noted ${n}.`));
    const res = await h.api.post(`/v1/sessions/${id}/messages`, { text: `message ${n}` });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === n, 30_000);
  }
  async function compact(id: string, count: number): Promise<void> {
    h.fake.enqueue(text(`Summary ${count}.`));
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`, {})).status, 202);
    await h.api.waitFor(
      id,
      (s) => s.status === 'idle' && !s.compaction_pending && s.compactions === count,
      30_000,
    );
  }
  const record = async (id: string, n: number): Promise<Rec> => {
    const res = await h.api.get(`/v1/sessions/${id}/iterations/${n}`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body as Rec;
  };
  /** Records 1…count, one read at a time (a tenant has at most 4 history reads in progress). */
  const records = async (id: string, count: number): Promise<Rec[]> => {
    const out: Rec[] = [];
    for (let n = 1; n <= count; n++) out.push(await record(id, n));
    return out;
  };
  const chat = async (id: string): Promise<ChatMessage[]> => {
    const res = await h.api.get(`/v1/chat/${id}/messages`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body as ChatMessage[];
  };

  /** A fork of `forkId` at record 1: made when the fork's history began at message 0 (`from`), else 404. */
  async function refusedUnlessFromStart(forkId: string, from: number): Promise<void> {
    const first = await h.api.post(`/v1/sessions/${forkId}/fork`, { at_iteration: 1 });
    if (from === 0) {
      assert.equal(first.status, 201, JSON.stringify(first.body));
      return;
    }
    assert.equal(first.status, 404, JSON.stringify(first.body));
    assert.equal((first.body as { error: { code: string } }).error.code, 'iteration_not_found');
  }

  it('answers its records and chat ids as the source does', async () => {
    const created = await h.api.post('/v1/sessions', { start: false, stream: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    // Records 1–2 turns, 3 a compaction (segment 0), 4 a turn, 5 a compaction (segment 1), 6–7 turns.
    await turn(id, 1);
    await turn(id, 2);
    await compact(id, 1);
    await turn(id, 3);
    await compact(id, 2);
    await turn(id, 4);
    await turn(id, 5);
    const source = await records(id, 7);
    // A chat id is `<session>-<whole-record index>`: the fork's are the source's with the fork's id.
    const sourceChat = new Map((await chat(id)).map((m) => [m.id.slice(id.length), m]));

    // At 2 (in segment 0: from the start), 4 (in segment 1: from the first summary), 7 (in the history: from the
    // second summary). The first message each fork copies is message `from` of the source's whole record.
    for (const [at, from] of [
      [2, 0],
      [4, source[2]!.reply_index],
      [7, source[4]!.reply_index],
    ] as const) {
      const fork = await h.api.post(`/v1/sessions/${id}/fork`, { at_iteration: at });
      assert.equal(fork.status, 201, JSON.stringify(fork.body));
      const forkId = fork.body.id as string;
      const expected = (rec: Rec) =>
        rec.reply_index >= from ? rec : { ...rec, reply: null, tool_results: null };
      for (let n = 1; n <= at; n++) {
        assert.deepEqual(await record(forkId, n), expected(source[n - 1]!), `fork at ${at}, record ${n}`);
      }
      assert.ok((await record(forkId, at)).reply !== null, `fork at ${at}: its last record's reply`);
      // The fork's chat page names its messages as the source's page does.
      const forkChat = await chat(forkId);
      assert.ok(forkChat.length > 0);
      for (const m of forkChat) {
        const index = m.id.slice(forkId.length);
        assert.deepEqual(m, { ...sourceChat.get(index), id: m.id }, `fork at ${at}: chat message ${m.id}`);
      }

      // A fork of the fork at record 1, whose messages it did not copy unless it started from the start: refused.
      await refusedUnlessFromStart(forkId, from);

      // The fork goes on and compacts: its records still read their own messages, and none of another's.
      await turn(forkId, (fork.body.iteration as number) + 1);
      const mine = at + 1;
      const before = await records(forkId, mine);
      assert.notEqual(before[mine - 1]!.reply, null);
      const history = (await h.api.get(`/v1/sessions/${forkId}/messages`)).body.data as unknown[];
      await compact(forkId, (fork.body.compactions as number) + 1);
      for (let n = 1; n <= mine; n++) {
        assert.deepEqual(await record(forkId, n), before[n - 1], `fork at ${at} compacted, record ${n}`);
      }
      // A fork of the fork at its own turn (now in its segment) takes the history the fork had then.
      const again = await h.api.post(`/v1/sessions/${forkId}/fork`, { at_iteration: mine });
      assert.equal(again.status, 201, JSON.stringify(again.body));
      assert.deepEqual(
        (await h.api.get(`/v1/sessions/${again.body.id as string}/messages`)).body.data,
        history,
      );
      // At record 1 still refused, now that the fork keeps a segment (which starts past those messages).
      await refusedUnlessFromStart(forkId, from);
    }
  });
});
