import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { Redis } from 'ioredis';
import { text, toolCall } from '../fake/script.js';
import { validateConversation, type FakeRequest } from '../fake/server.js';

const SESSIONS = 10;
/** Tool turns per session before the final text turn. */
const TOOL_TURNS = 4;

interface Turn {
  session: string;
  /** When the fake received the request and when its reply was handed to the socket (ms). */
  start: number;
  end: number;
  messageCount: number;
}

describe('two service processes on one Redis', () => {
  let h1: Harness;
  let h2: Harness;
  before(async () => {
    // A short lease, so renewals and expiry matter while turns take up to 450 ms.
    const env = { LEASE_TTL_MS: '1200' };
    h1 = await startHarness({ env });
    h2 = await startHarness({ env, redis: h1.redis, fakeServer: h1.fake });
  });
  after(async () => {
    await h2?.close();
    await h1?.close();
  });

  it('never run the same session at once, and never send a turn twice', async () => {
    const turns: Turn[] = [];
    const sessionOf = (req: FakeRequest): string => {
      const first: any = req.messages[0]?.content;
      const t = typeof first === 'string' ? first : first?.[0]?.text;
      return String(t);
    };
    h1.fake.setHandler(async (req) => {
      const turn: Turn = {
        session: sessionOf(req),
        start: req.at,
        end: 0,
        messageCount: req.messages.length,
      };
      turns.push(turn);
      const assistantTurns = req.messages.filter((m) => m.role === 'assistant').length;
      // Paced turns: 20–450 ms, some longer than a third of the lease (its renewal period).
      await new Promise((r) => setTimeout(r, 20 + Math.floor(Math.random() * 430)));
      turn.end = Date.now();
      return assistantTurns < TOOL_TURNS
        ? toolCall('calculate_sum', { a: assistantTurns, b: 1 })
        : text(`done ${turn.session}`);
    });

    const ids: string[] = [];
    const tags = new Map<string, string>();
    for (let i = 0; i < SESSIONS; i++) {
      const via = i % 2 === 0 ? h1 : h2;
      const tag = `job-${i}`;
      const r = await via.api.post('/v1/sessions', {
        input: tag,
        tools: ['calculate_sum'],
        stream: i % 3 !== 0,
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      ids.push(r.body.id);
      tags.set(r.body.id, tag);
    }

    // While the runs go on, both processes keep trying to take every run (as their sweepers would after a lease
    // expiry): only the lease holder may run it.
    // The lease holders seen meanwhile, to check that both processes did run sessions.
    const owners = new Set<string>();
    let kicking = true;
    const kicker = (async () => {
      while (kicking) {
        for (const id of ids) {
          h1.service.app.engine.kick(id);
          h2.service.app.engine.kick(id);
        }
        const holders = await Promise.all(ids.map((id) => h1.service.app.store.runs.leaseHolder(id)));
        for (const hld of holders) if (hld) owners.add(hld.replace(/:\d+$/, ''));
        await new Promise((r) => setTimeout(r, 15));
      }
    })();
    const finals = [];
    try {
      for (const id of ids) finals.push(await h1.api.waitStatus(id, ['idle', 'failed'], 40_000));
    } finally {
      kicking = false;
      await kicker;
    }

    for (const [i, s] of finals.entries()) {
      const tag = tags.get(s.id)!;
      assert.equal(s.status, 'idle', `${tag}: ${JSON.stringify(s.error)}`);
      assert.equal(s.stop_reason, 'end_turn', tag);
      assert.equal(s.iteration, TOOL_TURNS + 1, tag);
      const mine = turns.filter((t) => t.session === tag).sort((a, b) => a.start - b.start);
      assert.equal(mine.length, s.iteration, `${tag}: requests sent == iterations (no turn sent twice)`);
      assert.deepEqual(
        mine.map((t) => t.messageCount),
        Array.from({ length: TOOL_TURNS + 1 }, (_, k) => 2 * k + 1),
        `${tag}: each turn sent once, each with the history of the one before plus its tool results`,
      );
      for (let k = 1; k < mine.length; k++) {
        assert.ok(
          mine[k]!.start >= mine[k - 1]!.end,
          `${tag}: turn ${k + 1} started at ${mine[k]!.start}, before turn ${k} ended at ${mine[k - 1]!.end}`,
        );
      }
      const msgs = (await (i % 2 ? h2 : h1).api.get(`/v1/sessions/${s.id}/messages`)).body.data;
      assert.equal(msgs.length, 2 * (TOOL_TURNS + 1), tag);
      assert.doesNotThrow(() => validateConversation(msgs, true), `${tag}: history valid`);
      const iters = (await h2.api.get(`/v1/sessions/${s.id}/iterations`)).body.data;
      assert.deepEqual(
        iters.map((r: any) => r.iteration),
        [1, 2, 3, 4, 5],
        tag,
      );
    }
    assert.equal(turns.length, SESSIONS * (TOOL_TURNS + 1));
    assert.equal(
      owners.size,
      2,
      `both processes ran sessions (lease owners seen: ${[...owners].join(', ')})`,
    );
    assert.equal(h1.service.app.engine.activeRuns + h2.service.app.engine.activeRuns, 0);
  });
  it('a process that lost its lease (paused past the TTL) cannot write: its late reply is fenced out', async () => {
    h1.fake.reset();
    const redis = new Redis(h1.redis.url);
    try {
      let n = 0;
      let release!: () => void;
      const stale = new Promise<void>((r) => (release = r));
      h1.fake.setHandler(async () => {
        n++;
        if (n === 1) {
          await stale; // the first owner's turn answers only after the second owner has finished
          return text('from the stale owner');
        }
        return text('from the new owner');
      });
      const created = await h1.api.post('/v1/sessions', { input: 'fence me' });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.id;
      await h1.fake.waitForRequests(1);
      assert.ok(h1.service.app.engine.isRunningHere(id), 'h1 runs it');
      // A paused process does not renew: h1 must not learn of the loss before it tries to commit.
      h1.service.app.store.runs.renew = async () => true;
      // The lease expires as if h1 were paused longer than the TTL; h2 takes the run and finishes it.
      await redis.del(`s:{${id}}:l`);
      h2.service.app.engine.kick(id);
      const done = await h2.api.waitStatus(id, ['idle', 'failed']);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      const before = await h2.api.get(`/v1/sessions/${id}/messages`);
      release(); // now h1's turn answers; its commit must be refused
      await new Promise<void>((r) => {
        const t = setInterval(() => {
          if (!h1.service.app.engine.isRunningHere(id)) {
            clearInterval(t);
            r();
          }
        }, 10);
      });
      assert.equal(
        h1.fake.requests[0]!.status,
        200,
        'the stale owner did get its reply, and tried to commit it',
      );
      const after = await h2.api.get(`/v1/sessions/${id}`);
      const msgs = (await h2.api.get(`/v1/sessions/${id}/messages`)).body.data;
      assert.deepEqual(msgs, before.body.data, 'the stale owner wrote nothing');
      assert.equal(msgs.length, 2);
      assert.equal(msgs[1].content[0].text, 'from the new owner');
      assert.equal(after.body.iteration, 1);
      assert.equal(after.body.status, 'idle');
      assert.equal((await h2.api.get(`/v1/sessions/${id}/iterations`)).body.data.length, 1);
    } finally {
      // the prototype's renew again
      delete (h1.service.app.store as { renew?: unknown }).renew;
      redis.disconnect();
    }
  });
});
