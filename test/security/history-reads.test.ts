/**
 * Reads of a whole history are bounded per tenant whichever route makes them (found by a probe): at most 4 at once
 * (then 429 `rate_limited`, before Redis is asked), the chat's `GET /v1/chat/:id/messages` counted with
 * `GET /v1/sessions/:id/messages`, and `GET /v1/sessions/:id/iterations/:n` with them (a reply a compaction moved is
 * read with its whole segment: megabytes, read and decoded, as a history's); another tenant's read is not refused.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Api, startHarness, type Harness } from '../helpers/service.js';

describe('whole-history reads of one tenant', { timeout: 60_000 }, () => {
  let h: Harness;
  before(async () => {
    // Four heavy reads made at once, so the four held below all reach the store.
    h = await startHarness({ env: { API_KEYS: 'acme:key-a,globex:key-b', TENANT_HEAVY_READS: '4' } });
  });
  after(async () => h?.close());

  it('are 4 at once, through the chat route as through the REST one', async () => {
    const mine = (await h.api.post('/v1/sessions', { input: 'hi', start: false })).body.id as string;
    const b = new Api(h.service.url, 'key-b');
    const theirs = (await b.post('/v1/sessions', { input: 'hi', start: false })).body.id as string;
    const store = h.service.app.store;
    const loadFor = store.loadFor.bind(store);
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let arrived = 0;
    let fourIn = () => {};
    const four = new Promise<void>((resolve) => (fourIn = resolve));
    // The session's reads wait at the store until released: four of them stay in progress.
    store.loadFor = async (...args: Parameters<typeof store.loadFor>) => {
      if (args[1] === mine) {
        if (++arrived === 4) fourIn();
        await released;
      }
      return loadFor(...args);
    };
    try {
      const held = [
        h.api.get(`/v1/chat/${mine}/messages`),
        h.api.get(`/v1/chat/${mine}/messages`),
        h.api.get(`/v1/sessions/${mine}/messages`),
        h.api.get(`/v1/chat/${mine}/messages`),
      ];
      await four;
      for (const path of [
        `/v1/chat/${mine}/messages`,
        `/v1/sessions/${mine}/messages`,
        `/v1/sessions/${mine}/iterations/1`,
      ]) {
        const refused = await h.api.get(path);
        assert.equal(refused.status, 429, `${path}: ${JSON.stringify(refused.body)}`);
        assert.equal(refused.body.error.code, 'rate_limited');
        assert.ok(Number(refused.headers.get('retry-after')) > 0);
      }
      // Another tenant's history is read meanwhile.
      assert.equal((await b.get(`/v1/chat/${theirs}/messages`)).status, 200);
      release();
      for (const r of await Promise.all(held)) assert.equal(r.status, 200);
      assert.equal((await h.api.get(`/v1/chat/${mine}/messages`)).status, 200);
    } finally {
      release();
      store.loadFor = loadFor;
    }
  });
});
