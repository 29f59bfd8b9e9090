/**
 * Two replicas' agent sweeps look at one parent at once (every replica runs the sweep; a member is not leased). One
 * finds no child and, before it reads the child's mark, the other creates the child and marks it created. The
 * late one must see a child being created, not a deleted one: the parent's call is answered once, by the child's
 * findings. (The chaos test found this: a root answered "the sub-agent's session was deleted" while its child ran.)
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AgentSweep } from '../../src/agents/sweep.js';
import { childSessionId } from '../../src/agents/waiting.js';
import type { SessionStore } from '../../src/store/store.js';
import type { TreeEntry } from '../../src/store/tree-due.js';
import { drivenSweep, harnessWithoutSweep, writerWithResearcher } from '../helpers/agents.js';
import type { Api, Harness } from '../helpers/service.js';

/** One look of a sweep at one member of tenant `a`'s due set (what its loop does for each due member). */
const look = (sweep: AgentSweep, id: string) =>
  (sweep as unknown as { tick(e: TreeEntry): Promise<void> }).tick({ id, tenant: 'a', score: '0' });

describe('two agent sweeps on one parent', { timeout: 60_000 }, () => {
  let h: Harness;
  let a: Api;

  before(async () => {
    // The service's own sweep stays out of it: the two below are the replicas.
    h = await harnessWithoutSweep();
    a = h.api.as('key-a');
  });
  after(() => h.close());

  it("one creates the child between the other's two reads: the call is answered by the child, not as deleted", async () => {
    const { app } = h.service;
    const created = await a.post('/v1/sessions', writerWithResearcher);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const parentId: string = created.body.id;
    await a.waitFor(parentId, (s) => s.status === 'requires_action', 20_000);
    const call = (await a.get(`/v1/sessions/${parentId}/messages`)).body.data
      .at(-1)
      .content.find((b: { type: string }) => b.type === 'tool_use');
    const childId = childSessionId(parentId, call.id);

    const { sweep: first } = drivenSweep(app);
    // The late sweep's first read of the child finds nothing; the first sweep then creates the child, whole.
    let raced = false;
    const late = new Proxy(app.store, {
      get(target, key) {
        if (key === 'load')
          return async (id: string) => {
            const s = await target.load(id);
            if (id === childId && !raced) {
              raced = true;
              assert.equal(s, null);
              await look(first, parentId);
              assert.ok(await target.load(childId), 'the first sweep created the child');
            }
            return s;
          };
        const v: unknown = Reflect.get(target, key, target);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    }) satisfies SessionStore;
    await look(drivenSweep(app, late).sweep, parentId);
    assert.ok(raced, 'the late sweep looked for the child');

    // The call is unanswered: the parent still waits for its child.
    const parent = (await a.get(`/v1/sessions/${parentId}`)).body;
    assert.equal(parent.status, 'requires_action', JSON.stringify(parent));
    const child = await a.waitFor(childId, (s) => s.status === 'idle', 20_000);
    assert.equal(child.stop_reason, 'end_turn');

    // The child's end is looked at: its findings answer the call, and the parent writes from them.
    await look(first, childId);
    await a.waitFor(parentId, (s) => s.status === 'idle', 20_000);
    const last = (await a.get(`/v1/sessions/${parentId}/messages`)).body.data.at(-1);
    assert.match(JSON.stringify(last.content), /\(error: false\): Findings: Rayleigh/);
    assert.equal((await a.get(`/v1/sessions/${parentId}/children`)).body.data.length, 1);
  });
});
