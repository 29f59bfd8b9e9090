/**
 * Replays are paged by bytes (REPLAY_PAGE_BYTES): a replaying reader holds at most one bounded page, whatever the
 * size of the events, and reads the next page only once its socket drained. Readers that never read (raw sockets
 * that do not read) cost the process at most about a page each; a normal reader still gets every event once, in
 * order, and the JSON pages are bounded the same way.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { startTestRedis } from '../helpers/redis.js';
import { SessionStore } from '../../src/store/store.js';
import { sessionKeys } from '../../src/store/keys.js';
import { connectSse, connectWs, type Envelope } from '../fixtures/event-clients.js';

const MB = 1024 * 1024;
/** REPLAY_PAGE_BYTES of the service under test (the default). */
const PAGE_BYTES = MB;
/** Most of the log: events of 250 kB, four to a page. */
const EVENT_BYTES = 250 * 1024;
const EVENTS = 160;
/** One event larger than a page, in the middle of the log: it comes alone. */
const BIG_BYTES = 3 * MB;
const READERS = 8;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/** Heap and buffers held after a full collection; RSS for the report. */
function held() {
  gc();
  gc();
  const m = process.memoryUsage();
  return { held: m.heapUsed + m.external, rss: m.rss };
}

async function until(cond: () => boolean, what: string, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A client that sends its request and then never reads a byte: the server's writes back up. */
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

const wsRequest = (id: string) =>
  `GET /v1/sessions/${id}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
  `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`;
const sseRequest = (id: string) =>
  `GET /v1/sessions/${id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n`;

describe('replay paged by bytes', () => {
  let h: Harness;
  let id: string;
  let logIds: string[];
  before(async () => {
    // No append-only file: the log is ~45 MB.
    h = await startHarness({
      redis: await startTestRedis({ appendonly: false }),
      // Readers that stop reading are not cut off during the test: what they hold is what is measured.
      // The log (about 42 MB) stays whole: the byte bound of the log is not what is measured here.
      env: {
        EVENT_LOG_MAX: '100000',
        EVENT_LOG_MAX_BYTES: String(256 * 1024 * 1024),
        SLOW_READER_TIMEOUT_MS: '600000',
      },
    });
    id = (await h.api.post('/v1/sessions', { start: false })).body.id;
    const writerRedis = new Redis(h.redis.url);
    try {
      const writer = new SessionStore(writerRedis, {
        eventLogMax: 100_000,
        eventLogMaxBytes: 256 * 1024 * 1024,
      });
      const event = (n: number, bytes: number) =>
        ['stream.event', JSON.stringify({ n, text: 'z'.repeat(bytes - 40) })] as [string, string];
      for (let n = 0; n < EVENTS; n += 8) {
        const batch = Array.from({ length: 8 }, (_, i) => event(n + i, EVENT_BYTES));
        if (n === EVENTS / 2) batch.splice(4, 0, event(-1, BIG_BYTES));
        await writer.appendEvents(id, batch);
      }
      logIds = (await writerRedis.xrange(sessionKeys(id).events, '-', '+')).map(([eid]) => eid);
    } finally {
      writerRedis.disconnect();
    }
    // The session's own events (session.created, session.status), then the big one and the others.
    assert.equal(logIds.length, EVENTS + 3);
  });
  after(async () => {
    await h.close();
    await h.redis.stop();
  });

  it('a normal reader gets every event once, in order, over WebSocket and SSE', async () => {
    const ws = await connectWs(h.service.url, id);
    const sse = await connectSse(h.service.url, id);
    const all = (_e: Envelope, seen: Envelope[]) => seen.length === logIds.length;
    await Promise.all([
      ws.events.wait(all, 'the whole log', 60_000),
      sse.events.wait(all, 'the whole log', 60_000),
    ]);
    assert.deepEqual(
      ws.events.items.map((e) => e.id),
      logIds,
    );
    assert.deepEqual(
      sse.events.items.map((e) => e.id),
      logIds,
    );
    assert.equal(ws.events.items.find((e) => e.data.n === -1)!.data.text.length, BIG_BYTES - 40);
    ws.close();
    sse.close();
    await until(() => h.service.app.eventsHub.counts().clients === 0, 'the clients gone');
  });

  it('JSON pages hold at most REPLAY_PAGE_BYTES of events (a larger one alone) and page through the log', async () => {
    const got: string[] = [];
    let after = '0';
    let pages = 0;
    for (;;) {
      const page = await h.api.get(`/v1/sessions/${id}/events?after=${after}&limit=1000`);
      assert.equal(page.status, 200);
      const data = page.body.data as Envelope[];
      pages++;
      const bytes = data.reduce((n, e) => n + JSON.stringify(e.data).length, 0);
      assert.ok(data.length === 1 || bytes <= PAGE_BYTES, `a page of ${data.length} events, ${bytes} bytes`);
      got.push(...data.map((e) => e.id));
      if (!page.body.has_more) break;
      after = page.body.next_cursor;
    }
    assert.deepEqual(got, logIds);
    // Four 250 kB events fit a page: about a quarter as many pages as events.
    assert.ok(pages >= EVENTS / 4 && pages <= EVENTS / 4 + 3, `${pages} pages`);
  });

  it(`${READERS} readers that never read hold about a page each, not the log`, async () => {
    const hub = h.service.app.eventsHub;
    const port = Number(new URL(h.service.url).port);
    const base = held();
    const sockets: net.Socket[] = [];
    try {
      for (let i = 0; i < READERS; i++) {
        sockets.push(await nonReader(port, i % 2 ? sseRequest(id) : wsRequest(id)));
      }
      // Every reader's replay is stuck waiting for its socket to drain, which never happens.
      await until(() => hub.counts().draining === READERS, `${READERS} stalled replays`);
      const now = held();
      const grown = now.held - base.held;
      // Per reader: its page (the budget, or the one larger event) as read, as encoded for the wire and as queued
      // in its socket: three copies at most. The whole log is ~45 MB per reader.
      const bound = READERS * 3 * (PAGE_BYTES + BIG_BYTES) + 32 * MB;
      console.log(
        `${READERS} stalled readers of a ${((EVENTS * EVENT_BYTES + BIG_BYTES) / MB).toFixed(0)} MB log: heap+buffers ` +
          `grew ${(grown / MB).toFixed(1)} MB (bound ${(bound / MB).toFixed(0)} MB), RSS ${((now.rss - base.rss) / MB).toFixed(1)} MB`,
      );
      assert.ok(grown < bound, `grew ${(grown / MB).toFixed(1)} MB`);
    } finally {
      for (const s of sockets) s.destroy();
    }
    await until(() => hub.counts().clients === 0, 'the stalled readers gone');
  });
});
