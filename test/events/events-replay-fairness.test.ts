/**
 * One tenant's replays take turns (src/events/replay-gate.ts): many WebSocket and SSE streams of tenant A replaying
 * a large log and never reading read at most REPLAY_READS_PER_TENANT pages from Redis at once and hold at most
 * REPLAY_PAGES_PER_TENANT pages, the others waiting in A's line; tenant B's requests keep being answered (no 503)
 * and B's own replay goes through meanwhile. Before the bound every reader read its own page at once (the probe:
 * 900 such sockets tripped the Redis health guard, 503 `store_unavailable` for another tenant, RSS 370 → 940 MB).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis } from '../helpers/redis.js';
import { SessionStore } from '../../src/store/store.js';
import { REPLAY_PAGES_PER_TENANT, REPLAY_READS_PER_TENANT } from '../../src/events/replay-gate.js';
import { connectWs, type Envelope } from '../fixtures/event-clients.js';

/** A's streams: more than its page places, so most wait in its line. */
const STREAMS = 60;
/** Events of each log: 2 kB each, about 12 MB (more than loopback's socket buffers take: the replays stall). */
const EVENTS = 6000;

async function until(cond: () => boolean, what: string | (() => string), ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end)
      throw new Error(`timed out waiting for ${typeof what === 'string' ? what : what()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A client that sends its request and then never reads a byte. */
function nonReader(port: number, request: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.pause();
      s.write(request);
      resolve(s);
    });
    s.on('error', reject);
  });
}

const auth = 'Authorization: Bearer key-acme\r\n';
const wsRequest = (id: string) =>
  `GET /v1/sessions/${id}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}Upgrade: websocket\r\n` +
  `Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`;
const sseRequest = (id: string) =>
  `GET /v1/sessions/${id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}Accept: text/event-stream\r\n\r\n`;

describe('replays take turns per tenant', { timeout: 180_000 }, () => {
  let h: Harness;
  let acme: Api;
  let globex: Api;
  let acmeIds: string[];
  let globexId: string;

  before(async () => {
    h = await startHarness({
      redis: await startTestRedis({ appendonly: false }),
      env: {
        API_KEYS: 'acme:key-acme,globex:key-globex',
        // Stalled readers stay for the whole test: their places are what is measured.
        SLOW_READER_TIMEOUT_MS: '600000',
        EVENT_LOG_MAX: '100000',
      },
    });
    acme = h.api.as('key-acme');
    globex = h.api.as('key-globex');
    const create = async (api: Api) => {
      const r = await api.post('/v1/sessions', { start: false });
      assert.equal(r.status, 201);
      return r.body.id as string;
    };
    acmeIds = [await create(acme), await create(acme)];
    globexId = await create(globex);
    const writerRedis = new Redis(h.redis.url);
    try {
      const writer = new SessionStore(writerRedis, {
        eventLogMax: 100_000,
        eventLogMaxBytes: 256 * 1024 * 1024,
      });
      for (const id of [...acmeIds, globexId]) {
        for (let n = 0; n < EVENTS; n += 500) {
          const batch = Array.from(
            { length: 500 },
            (_, i) =>
              ['stream.event', JSON.stringify({ n: n + i, text: 'z'.repeat(2000) })] as [string, string],
          );
          await writer.appendEvents(id, batch);
        }
      }
    } finally {
      writerRedis.disconnect();
    }
  });
  after(async () => {
    await h.close();
    await h.redis.stop();
  });

  it("bounds a tenant's replay reads and pages; another tenant is answered meanwhile", async () => {
    const hub = h.service.app.eventsHub;
    // Page reads in flight per tenant, through the hub's reads of the log (the replays' and the live relay's).
    const owner = new Map<string, string>([
      ...acmeIds.map((id) => [id, 'acme'] as const),
      [globexId, 'globex'],
    ]);
    const inFlight = new Map<string, number>();
    const most = new Map<string, number>();
    const page = hub.eventLog.page.bind(hub.eventLog);
    hub.eventLog.page = async (sessionId, afterId, limits) => {
      const tenant = owner.get(sessionId) ?? '?';
      const n = (inFlight.get(tenant) ?? 0) + 1;
      inFlight.set(tenant, n);
      most.set(tenant, Math.max(most.get(tenant) ?? 0, n));
      try {
        return await page(sessionId, afterId, limits);
      } finally {
        inFlight.set(tenant, inFlight.get(tenant)! - 1);
      }
    };
    const port = Number(new URL(h.service.url).port);
    const sockets: net.Socket[] = [];
    try {
      await Promise.all(
        Array.from({ length: STREAMS }, async (_, i) => {
          const id = acmeIds[i % acmeIds.length]!;
          sockets.push(await nonReader(port, i % 2 ? sseRequest(id) : wsRequest(id)));
        }),
      );
      const acmeGate = () => hub.replays.counts().tenants.get('acme');
      // Every stream subscribed; A's page places all held by stalled replays, the rest waiting in its line.
      await until(
        () =>
          acmeGate()?.pages === REPLAY_PAGES_PER_TENANT &&
          acmeGate()?.pagesQueued === STREAMS - REPLAY_PAGES_PER_TENANT,
        "A's line full",
      );
      await until(
        () => hub.counts().draining === REPLAY_PAGES_PER_TENANT,
        () => `the stalled replays (${JSON.stringify({ ...hub.counts(), gate: acmeGate() })})`,
      );
      // B: its requests are answered, and its own replay of a log as large goes through while A's wait.
      const ws = await connectWs(h.service.url, globexId, { token: 'key-globex' });
      for (let i = 0; i < 20; i++) {
        const [got, created] = await Promise.all([
          globex.get(`/v1/sessions/${globexId}`),
          globex.post('/v1/sessions', { start: false }),
        ]);
        assert.equal(got.status, 200, JSON.stringify(got.body));
        assert.equal(created.status, 201, JSON.stringify(created.body));
      }
      await ws.events.wait(
        (_e: Envelope, all: Envelope[]) => all.length === EVENTS + 2,
        "B's whole log",
        60_000,
      );
      ws.close();
      assert.equal(hub.counts().draining, REPLAY_PAGES_PER_TENANT);
      assert.ok((most.get('acme') ?? 0) > 0, 'no page read of A was seen');
      assert.ok(
        (most.get('acme') ?? 0) <= REPLAY_READS_PER_TENANT,
        `A read ${most.get('acme')} pages at once`,
      );
      console.log(`most page reads at once: ${JSON.stringify(Object.fromEntries(most))}`);
    } finally {
      for (const s of sockets) s.destroy();
      hub.eventLog.page = page;
    }
    // Every place given back, the waiting ones' included.
    await until(() => hub.counts().clients === 0, 'the streams gone');
    // (A closed replay gives its place back once its pending wait for a drain or a read settles.)
    await until(
      () => hub.replays.counts().tenants.size === 0 && hub.replays.counts().reads === 0,
      () => `every place given back (${JSON.stringify([...hub.replays.counts().tenants])})`,
    );
  });
});
