/**
 * One cancel asks its run once: a cancel whose request was written, and which then commits the cancel itself (the
 * owner ended the run waiting for its client before it saw the request), finds the session changed under that
 * commit when the client's answer lands meanwhile and a new run takes the session. It works the cancel out again
 * from a new read without writing `session.cancel_requested` a second time (starting the cancel over did: two
 * requests for one cancel), and the new run is still cancelled.
 *
 * Each step held at a gate on the store's `apply` (the owner's end of the run; the cancel's own commit), no timing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { hang, toolCalls, toolUse } from '../fake/script.js';
import { askUser } from '../fixtures/tool-tasks.js';
import { gate, within } from '../helpers/promises.js';
import { startHarness, type Harness } from '../helpers/service.js';
import type { SessionStore } from '../../src/store/store.js';

describe('a cancel asks its run once', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.close();
  });

  it("a cancel whose own commit loses to the client's answer asks the new run without a second request", async () => {
    const { api, fake } = h;
    // The first turn asks the client; the run the answer starts then hangs in its model call (holding its lease).
    fake.enqueue(toolCalls([toolUse('ask_user', { q: 'Which colour?' }, 'toolu_ask')]), hang());
    const store = h.service.app.store as SessionStore;
    const apply = store.apply.bind(store);
    const ownerEnding = gate();
    const ownerGo = gate();
    const asked = gate();
    const cancelCommitting = gate();
    const cancelGo = gate();
    let id = '';
    let heldOwner = false;
    let heldCancel = false;
    store.apply = async (...args: Parameters<SessionStore['apply']>) => {
      const [sid, guard, ops] = args;
      if (
        sid === id &&
        !heldOwner &&
        guard.fence !== undefined &&
        ops.hset?.['status'] === 'requires_action'
      ) {
        // The owner's end of its run (waiting for the client), held until the cancel has asked it to stop.
        heldOwner = true;
        ownerEnding.open();
        await ownerGo.wait;
      }
      if (
        sid === id &&
        !heldCancel &&
        guard.fence === undefined &&
        ops.hset?.['stop_reason'] === 'cancelled'
      ) {
        // The cancel's commit of the session found waiting, held while the client answers.
        heldCancel = true;
        cancelCommitting.open();
        await cancelGo.wait;
      }
      const r = await apply(...args);
      if (sid === id && guard.fence === undefined && ops.hset?.['control'] === 'cancel') asked.open();
      return r;
    };
    try {
      const created = await api.post('/v1/sessions', { input: 'A hat?', tools: [askUser] });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      id = created.body.id;
      await within(ownerEnding.wait, 10_000, "the owner's end of the run");
      const cancelling = api.post(`/v1/sessions/${id}/cancel`);
      await within(asked.wait, 10_000, 'the cancel request');
      ownerGo.open();
      // The owner ended the run waiting for its client: the cancel commits it here, held.
      await within(cancelCommitting.wait, 10_000, "the cancel's own commit");
      const answer = await api.post(`/v1/sessions/${id}/tool-results`, {
        results: [{ tool_use_id: 'toolu_ask', content: 'Red' }],
      });
      assert.equal(answer.status, 202, JSON.stringify(answer.body));
      // The run the answer started holds the lease once its model call is out.
      await fake.waitForRequests(2, 10_000);
      cancelGo.open();
      const c = await cancelling;
      assert.ok(c.status === 200 || c.status === 202, JSON.stringify(c.body));
      const done = await api.waitStatus(id, 'idle');
      assert.equal(done.stop_reason, 'cancelled');
      const log = await api.get(`/v1/sessions/${id}/events`);
      assert.equal(log.status, 200, JSON.stringify(log.body));
      const requests = (log.body.data as Array<{ type: string }>).filter(
        (e) => e.type === 'session.cancel_requested',
      );
      assert.equal(requests.length, 1, JSON.stringify(log.body.data.map((e: { type: string }) => e.type)));
    } finally {
      store.apply = apply;
      ownerGo.open();
      cancelGo.open();
    }
  });
});
