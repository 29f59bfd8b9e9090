import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, clientFor, type Harness } from '../helpers/service.js';
import { text } from '../fake/script.js';
import { connectSse, connectWs, readLog, UpgradeRefused, type Envelope } from '../fixtures/event-clients.js';
import { NotFoundError } from '../../packages/client/src/index.js';

const KEYS = 'acme:key-acme,globex:key-globex';
const types = (evs: readonly Pick<Envelope, 'type'>[]) => evs.map((e) => e.type);

const refused = (status: number, code: string) => (err: unknown) => {
  assert.ok(err instanceof UpgradeRefused, String(err));
  assert.equal(err.status, status);
  assert.equal(err.body.error.code, code);
  return true;
};

/**
 * docs/API.md §6: a follower that reconnects with the id of the last event it saw misses nothing, also when the
 * session was deleted meanwhile (its log is kept 60 s, §9.18): it reads the rest, `session.deleted` last, and the
 * stream ends as for a follower connected at the delete. Nobody else learns of the log.
 */
describe('resuming after a delete', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: KEYS } });
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  /**
   * A session that ran a turn, deleted; a cursor in its log's middle, the types of the events after it (what a
   * reconnect with it must read), and the id of its `session.deleted`.
   */
  async function deletedSession(): Promise<{
    id: string;
    cursor: string;
    rest: string[];
    deletedId: string;
  }> {
    h.fake.enqueue(text('One two three four five.'));
    const id = (await h.api.post('/v1/sessions', { input: 'Count' })).body.id as string;
    await h.api.waitStatus(id, 'idle');
    const log = await readLog(h.service.url, id, 'key-acme');
    assert.ok(log.length > 4);
    const at = log.length - 3;
    assert.equal((await h.api.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    // The page after the newest event the follower saw: only session.deleted (the log is read by its cursor).
    const tail = await h.api.get(`/v1/sessions/${id}/events?after=${log.at(-1)!.id}`);
    assert.equal(tail.status, 200);
    assert.deepEqual(types(tail.body.data), ['session.deleted']);
    assert.equal(tail.body.has_more, false);
    const deletedId = tail.body.data[0].id as string;
    assert.equal(tail.body.next_cursor, deletedId);
    return { id, cursor: log[at]!.id, rest: [...types(log.slice(at + 1)), 'session.deleted'], deletedId };
  }

  it('WebSocket: the events after the cursor, session.deleted last, then close 1000 session_deleted', async () => {
    const { id, cursor, rest } = await deletedSession();
    const ws = await connectWs(h.service.url, id, { token: 'key-acme', after: cursor });
    const closed = await ws.closed;
    assert.deepEqual(closed, { code: 1000, reason: 'session_deleted' });
    assert.deepEqual(types(ws.events.items), rest);
    assert.equal(rest.at(-1), 'session.deleted');
    // The cursor of the last event (a follower that saw session.deleted and reconnects): nothing more, the same end.
    const last = ws.events.items.at(-1)!.id;
    const again = await connectWs(h.service.url, id, { token: 'key-acme', after: last });
    assert.deepEqual(await again.closed, { code: 1000, reason: 'session_deleted' });
    assert.deepEqual(again.events.items, []);
  });

  it('SSE with Last-Event-ID, and a JSON page after a cursor: the rest of the log', async () => {
    const { id, cursor, rest, deletedId } = await deletedSession();
    const sse = await connectSse(h.service.url, id, { token: 'key-acme', lastEventId: cursor });
    assert.equal(sse.status, 200);
    await sse.ended;
    assert.deepEqual(types(sse.events.items), rest);
    const end = sse.records.items.at(-1)!;
    assert.equal(end.event, 'end');
    assert.deepEqual(JSON.parse(end.data), {
      type: 'end',
      reason: 'session_deleted',
      final: true,
      last_event_id: deletedId,
    });
    // Reconnecting after session.deleted itself: no event, the same end.
    const again = await connectSse(h.service.url, id, { token: 'key-acme', lastEventId: deletedId });
    assert.equal(again.status, 200);
    await again.ended;
    assert.deepEqual(again.events.items, []);
    assert.equal(JSON.parse(again.records.items.at(-1)!.data).reason, 'session_deleted');
    const page = await h.api.get(`/v1/sessions/${id}/events?after=${cursor}`);
    assert.equal(page.status, 200);
    assert.deepEqual(types(page.body.data), rest);
    assert.equal(page.body.next_cursor, deletedId);
    assert.equal(page.body.has_more, false);
  });

  it('the typed client follow(id, {after}) yields the rest and returns', async () => {
    const { id, cursor, rest } = await deletedSession();
    const got: string[] = [];
    for await (const e of clientFor(h.service.url, 'key-acme').follow(id, { after: cursor }))
      got.push(e.type);
    assert.deepEqual(got, rest);
  });

  it('stays 404 for another tenant, without a cursor, for a session never made; a client token stays refused', async () => {
    h.fake.enqueue(text('Hi.'));
    const id = (await h.api.post('/v1/sessions', { input: 'Hi' })).body.id as string;
    await h.api.waitStatus(id, 'idle');
    const token = (await h.api.post('/v1/client-tokens', { session_id: id, scopes: ['read'] })).body
      .token as string;
    const cursor = (await readLog(h.service.url, id, 'key-acme'))[0]!.id;
    assert.equal((await h.api.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    const base = h.service.url;
    const never = 'ses_' + 'x'.repeat(24);
    const cases: Array<[string, string, string | undefined, number, string]> = [
      ['another tenant', id, cursor, 404, 'session_not_found'],
      ['no cursor', id, undefined, 404, 'session_not_found'],
      ['cursor 0', id, '0', 404, 'session_not_found'],
      ['never made', never, cursor, 404, 'session_not_found'],
      ['revoked client token', id, cursor, 401, 'unauthorized'],
    ];
    for (const [what, sid, after, status, code] of cases) {
      const bearer =
        what === 'another tenant' ? 'key-globex' : what === 'revoked client token' ? token : 'key-acme';
      await assert.rejects(
        connectWs(base, sid, { token: bearer, ...(after ? { after } : {}) }),
        refused(status, code),
        `WS ${what}`,
      );
      const sse = await connectSse(base, sid, { token: bearer, ...(after ? { lastEventId: after } : {}) });
      assert.equal(sse.status, status, `SSE ${what}`);
      sse.close();
      const page = await h.api.as(bearer).get(`/v1/sessions/${sid}/events${after ? `?after=${after}` : ''}`);
      assert.equal(page.status, status, `JSON ${what}`);
      assert.equal(page.body.error.code, code, `JSON ${what}`);
    }
    await assert.rejects(
      async () => {
        for await (const _ of clientFor(base, 'key-globex').follow(id, { after: cursor })) void _;
      },
      (err) => err instanceof NotFoundError,
    );
  });
});
