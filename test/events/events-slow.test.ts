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
  /** Another replica's connection, writing events as its relay would; closed in `after`, so a test that times out
   * leaves no client reconnecting to the stopped server (which would keep this file's process alive). */
  let writerRedis: Redis;
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
    writerRedis = new Redis(h.redis.url);
  });
  after(async () => {
    writerRedis?.disconnect();
    await h.close();
    await h.redis.stop();
  });

  it('a client that stops reading is closed with 1013 while the process RSS stays bounded', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    const id = created.body.id;
    // Another replica runs a chatty session: it appends stream events to the log as the engine's relay does.
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
    // Warm up the relay path once, so the measure below sees steady-state memory. One batch at a time, each read
    // before the next is written: the warm reader shares this process's event loop with the service, and 4 MB
    // written at once can sit in its socket past WS_MAX_BUFFER_BYTES on a busy machine, which cuts it off as a
    // slow reader (then it never reaches 4 MB; seen in CI as a 300 s timeout).
    const warm = counting(await connectRaw(h.service.url, id));
    const warmCut = once(warm.ws, 'close').then(([c, r]) =>
      assert.fail(`the warm-up reader closed: ${c} ${r}`),
    );
    for (let batches = 1; batches * batch.length * EVENT_BYTES <= 4 * MB; batches++) {
      await writer.appendEvents(id, batch);
      // A frame carries its event's text and more, so the reader has all of a batch once it holds its texts' bytes.
      await Promise.race([warm.reach(batches * batch.length * chunk.length), warmCut]);
    }
    warm.ws.terminate();
    const rssBefore = settledRss();

    const slow = counting(await connectRaw(h.service.url, id, warm.lastId));
    (slow.ws as any)._socket.pause();
    const cut = once(h.service.app.eventsHub, 'slow-reader');
    // Its close, whatever the reason: a stream closed for another one must fail here, not leave `cut` pending.
    const closed = once(slow.ws, 'close') as Promise<[number, Buffer]>;
    const writing = chat(TOTAL_BYTES);
    await Promise.race([
      cut,
      closed.then(([c, r]) => assert.fail(`closed before the slow-reader cut: ${c} ${String(r)}`)),
    ]);
    // Read again: the client gets what was queued, then the close frame.
    (slow.ws as any)._socket.resume();
    const [code, reason] = await closed;
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
  });

  it('a client that stops reading during its replay is closed as a slow reader once the socket stalls', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    const id = created.body.id;
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
  });
});
