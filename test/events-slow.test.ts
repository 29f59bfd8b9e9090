import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from './helpers/service.js';
import { startTestRedis } from './helpers/redis.js';
import { SessionStore } from '../src/store/store.js';
import { hubFor } from '../src/events/hub.js';
import { connectWs } from './fixtures/event-clients.js';

const MB = 1024 * 1024;
const EVENT_BYTES = 8 * 1024;
const TOTAL_BYTES = Number(process.env.SLOW_TOTAL_MB ?? 96) * MB;

describe('slow readers', () => {
  let h: Harness;
  before(async () => {
    // No append-only file: this test writes ~100 MB of events, and fsync on every write would dominate its time.
    h = await startHarness({
      redis: await startTestRedis({ appendonly: false }),
      env: { EVENT_LOG_MAX: '100000', WS_MAX_BUFFER_BYTES: process.env.SLOW_MAX_BUF ?? String(MB) },
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
      const warm = await connectWs(h.service.url, id);
      await chat(4 * MB);
      await warm.events.wait((_e, all) => all.length >= 4 * 128, 'the warm-up events');
      warm.close();
      const rssBefore = process.memoryUsage().rss;

      const slow = await connectWs(h.service.url, id, { after: warm.lastId! });
      (slow.ws as any)._socket.pause();
      const cut = once(hubFor(h.service.app), 'slow-reader');
      const writing = chat(TOTAL_BYTES);
      await cut;
      // Read again: the client gets what was queued, then the close frame.
      (slow.ws as any)._socket.resume();
      const closed = await slow.closed;
      assert.equal(closed.code, 1013);
      assert.equal(closed.reason, 'slow_reader');
      await writing;
      const grown = process.memoryUsage().rss - rssBefore;
      const received = slow.events.items.length * EVENT_BYTES;
      console.log(
        `rss grew ${(grown / MB).toFixed(1)} MB; ${(TOTAL_BYTES / MB).toFixed(0)} MB written; the slow client got ${(received / MB).toFixed(1)} MB before 1013`,
      );
      assert.ok(received < TOTAL_BYTES / 4, 'the slow client was cut off early');
      assert.ok(grown < TOTAL_BYTES / 3, `RSS grew by ${(grown / MB).toFixed(1)} MB`);
      assert.deepEqual(hubFor(h.service.app).counts(), { sessions: 0, clients: 0, live: 0 });
    } finally {
      writerRedis.disconnect();
    }
  });
});
