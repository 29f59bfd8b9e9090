/**
 * One tenant's endpoints take at most a quarter of a replica's webhook attempts in flight (16 of 64), however many of
 * them become due at once: each claim holds its room before it is sent, so claims of one tenant's endpoints running
 * together cannot each see the room the others are about to fill. Another tenant's delivery goes through meanwhile.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startHarness, type Harness } from '../helpers/service.js';

describe("a tenant's webhook attempts in flight", { timeout: 60_000 }, () => {
  let h: Harness;
  let server: http.Server;
  let url = '';
  /** Requests held open, by the path they came to (`/a/<i>` for tenant a, `/b` for tenant b). */
  const held: Array<{ path: string; res: http.ServerResponse }> = [];
  let seen: () => void = () => {};
  let b2Failed = 0;
  before(async () => {
    server = http.createServer((req, res) => {
      req.resume();
      // Tenant b's `/b2` fails its first attempt: its retry comes due through the poll.
      if (req.url === '/b2' && b2Failed++ === 0) return void res.writeHead(500).end();
      held.push({ path: req.url ?? '', res });
      seen();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    h = await startHarness({
      env: {
        API_KEYS: 'a:key-a,b:key-b',
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_TIMEOUT_MS: '60000',
        WEBHOOK_MAX_PER_TENANT: '100',
        WEBHOOK_POLL_MS: '100',
        WEBHOOK_RETRY_BASE_MS: '500',
        WEBHOOK_RETRY_MAX_MS: '500',
      },
    });
  });
  after(async () => {
    for (const x of held) x.res.destroy();
    await h?.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const until = (pred: () => boolean) =>
    new Promise<void>((resolve) => {
      if (pred()) return resolve();
      seen = () => {
        if (pred()) resolve();
      };
    });

  it('20 endpoints due at once: 16 attempts in flight, and another tenant is not held back', async () => {
    const a = h.api.as('key-a');
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const w = await a.post('/v1/webhooks', { url: `${url}/a/${i}` });
      assert.equal(w.status, 201, JSON.stringify(w.body));
      ids.push(w.body.id);
    }
    // Every endpoint's test message due at once; the receiver answers none of them.
    await Promise.all(
      ids.map(async (id) => assert.equal((await a.post(`/v1/webhooks/${id}/test`)).status, 202)),
    );
    await until(() => held.filter((x) => x.path.startsWith('/a/')).length >= 16);
    // Another tenant's delivery comes through while tenant a holds its 16 ...
    const b = h.api.as('key-b');
    const wb = (await b.post('/v1/webhooks', { url: `${url}/b` })).body;
    assert.equal((await b.post(`/v1/webhooks/${wb.id}/test`)).status, 202);
    await until(() => held.some((x) => x.path === '/b'));
    // ... and by then tenant a has no more than its 16 in flight.
    assert.equal(held.filter((x) => x.path.startsWith('/a/')).length, 16);
  });

  it("another tenant's retry is not held behind the due endpoints of a tenant at its cap", async () => {
    // Tenant a: 50 more endpoints due (70 with those of the test before), 16 in flight, the rest waiting at the
    // head of the due set for room that does not come.
    const a = h.api.as('key-a');
    for (let i = 20; i < 70; i++) {
      const w = await a.post('/v1/webhooks', { url: `${url}/a/${i}` });
      assert.equal(w.status, 201, JSON.stringify(w.body));
      assert.equal((await a.post(`/v1/webhooks/${w.body.id}/test`)).status, 202);
    }
    const b = h.api.as('key-b');
    const wb = (await b.post('/v1/webhooks', { url: `${url}/b2` })).body;
    assert.equal((await b.post(`/v1/webhooks/${wb.id}/test`)).status, 202);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      until(() => held.some((x) => x.path === '/b2')),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("tenant b's retry never came")), 15_000);
      }),
    ]).finally(() => clearTimeout(timer));
    assert.equal(b2Failed, 2, 'the first attempt failed, the retry came');
  });
});
