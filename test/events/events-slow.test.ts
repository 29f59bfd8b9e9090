import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { startTestRedis } from '../helpers/redis.js';
import { SessionStore } from '../../src/store/store.js';
import { WebSocket } from 'ws';
import { wsUrl } from '../fixtures/event-clients.js';

async function connectRaw(base: string, id: string, after?: string): Promise<WebSocket> {
  const ws = new WebSocket(wsUrl(base, id, after));
  await once(ws, 'open');
  return ws;
}

/** A client that keeps no event, only counts bytes (so the test's own memory does not blur the measure). */
function counting(ws: WebSocket) {
  const c = {
    ws,
    bytes: 0,
    lastId: undefined as string | undefined,
    reach(bytes: number) {
      return new Promise<void>((resolve) => {
        const check = () => {
          if (c.bytes < bytes) return;
          ws.off('message', check);
          resolve();
        };
        ws.on('message', check);
        check();
      });
    },
  };
  ws.on('message', (data: Buffer) => {
    c.bytes += data.byteLength;
    c.lastId = /"id":"([0-9-]+)"/.exec(data.subarray(0, 40).toString())?.[1] ?? c.lastId;
  });
  return c;
}

const MB = 1024 * 1024;
/** SLOW_READER_TIMEOUT_MS of the service under test. */
const STALL_MS = 1500;

// A full collection before each measure, so RSS reflects what is held rather than garbage not yet collected.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const settledRss = () => {
  gc();
  return process.memoryUsage().rss;
};
const EVENT_BYTES = 8 * 1024;
const TOTAL_BYTES = Number(process.env['SLOW_TOTAL_MB'] ?? 96) * MB;

describe('slow readers', () => {
  let h: Harness;
  before(async () => {
    // No append-only file: this test writes ~100 MB of events, and fsync on every write would dominate its time.
    h = await startHarness({
      redis: await startTestRedis({ appendonly: false }),
      env: {
        EVENT_LOG_MAX: '100000',
        WS_MAX_BUFFER_BYTES: process.env['SLOW_MAX_BUF'] ?? String(MB),
        SLOW_READER_TIMEOUT_MS: String(STALL_MS),
      },
    });
  });
  after(async () => {
    await h.close();
    await h.redis.stop();
  });

  it('a client that stops reading is closed with 1013 while the process RSS stays bounded', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    const id = created.body.id;
    // Another replica runs a chatty session: it appends stream events to the log as the engine's relay does.
    const writerRedis = new Redis(h.redis.url);
    const writer = new SessionStore(writerRedis, { eventLogMax: 100_000 });
    const chunk = 'x'.repeat(EVENT_BYTES - 200);
    // One batch, built once and written again and again: the writer itself makes no garbage to blur the measure.
    const batch: Array<[string, string]> = Array.from({ length: 32 }, () => [
      'stream.event',
      JSON.stringify({
        iteration: 1,
        event: { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: chunk } },
      }),
    ]);
    const chat = async (bytes: number) => {
      for (let written = 0; written < bytes; written += batch.length * EVENT_BYTES) {
        await writer.appendEvents(id, batch);
      }
    };
    try {
      // Warm up the relay path once, so the measure below sees steady-state memory.
      const warm = counting(await connectRaw(h.service.url, id));
      await chat(4 * MB);
      await warm.reach(4 * MB);
      warm.ws.terminate();
      const rssBefore = settledRss();

      const slow = counting(await connectRaw(h.service.url, id, warm.lastId));
      (slow.ws as any)._socket.pause();
      const cut = once(h.service.app.eventsHub, 'slow-reader');
      const writing = chat(TOTAL_BYTES);
      await cut;
      // Read again: the client gets what was queued, then the close frame.
      (slow.ws as any)._socket.resume();
      const [code, reason] = (await once(slow.ws, 'close')) as [number, Buffer];
      assert.equal(code, 1013);
      assert.equal(String(reason), 'slow_reader');
      await writing;
      const grown = settledRss() - rssBefore;
      console.log(
        `rss grew ${(grown / MB).toFixed(1)} MB; ${(TOTAL_BYTES / MB).toFixed(0)} MB written; the slow client got ${(slow.bytes / MB).toFixed(1)} MB before 1013`,
      );
      assert.ok(slow.bytes < TOTAL_BYTES / 4, 'the slow client was cut off early');
      assert.ok(grown < TOTAL_BYTES / 3, `RSS grew by ${(grown / MB).toFixed(1)} MB`);
      assert.deepEqual(h.service.app.eventsHub.counts(), { sessions: 0, clients: 0, live: 0, draining: 0 });
    } finally {
      writerRedis.disconnect();
    }
  });

  it('a client that stops reading during its replay is closed as a slow reader once the socket stalls', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    const id = created.body.id;
    const writerRedis = new Redis(h.redis.url);
    try {
      // 8 MB of log: far more than the socket buffers hold, so a replay to a reader that reads nothing stalls.
      const writer = new SessionStore(writerRedis, { eventLogMax: 100_000 });
      const event = JSON.stringify({ iteration: 1, event: { text: 'y'.repeat(EVENT_BYTES - 200) } });
      for (let i = 0; i < 32; i++) {
        await writer.appendEvents(
          id,
          Array.from({ length: 32 }, () => ['stream.event', event] as [string, string]),
        );
      }
      const cut = once(h.service.app.eventsHub, 'slow-reader');
      const ws = new WebSocket(wsUrl(h.service.url, id));
      ws.once('upgrade', (res) => res.socket.pause());
      await once(ws, 'open');
      (ws as any)._socket.pause();
      const t0 = Date.now();
      const [, transport] = (await cut) as [string, string];
      assert.equal(transport, 'ws');
      const waited = Date.now() - t0;
      assert.ok(waited >= STALL_MS - 200, `closed after ${waited} ms, not before the stall timeout`);
      const closed = once(ws, 'close');
      (ws as any)._socket.resume();
      const [code, reason] = (await closed) as [number, Buffer];
      assert.equal(code, 1013);
      assert.equal(String(reason), 'slow_reader');
      assert.deepEqual(h.service.app.eventsHub.counts(), { sessions: 0, clients: 0, live: 0, draining: 0 });

      // The same over SSE: the response is dropped.
      const sseCut = once(h.service.app.eventsHub, 'slow-reader');
      const req = http.get(`${h.service.url}/v1/sessions/${id}/events`, {
        headers: { accept: 'text/event-stream' },
      });
      const [res] = (await once(req, 'response')) as [http.IncomingMessage];
      res.pause();
      const [, sseTransport] = (await sseCut) as [string, string];
      assert.equal(sseTransport, 'sse');
      req.destroy();
    } finally {
      writerRedis.disconnect();
    }
  });
});
