/**
 * The bytes one tenant's event streams hold queued in a process are bounded (TENANT_MAX_STREAM_BUFFERED_BYTES), not
 * only each stream's (WS_MAX_BUFFER_BYTES): a tenant's readers that stop reading are cut as slow readers once their
 * sum is over, while its reader that keeps up and another tenant's reader that holds less are left alone.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { WebSocket } from 'ws';
import { startHarness, type Harness } from '../helpers/service.js';
import { startTestRedis } from '../helpers/redis.js';
import { SessionStore } from '../../src/store/store.js';
import { wsUrl } from '../fixtures/event-clients.js';
import { START } from '../../src/events/cursor.js';
import type { Subscription } from '../../src/events/hub.js';
import type { Sink } from '../../src/events/reader.js';

const MB = 1024 * 1024;
const LIMIT = 4 * MB;
const EVENT_BYTES = 8 * 1024;

/** A follower that keeps only a count of the bytes it got and whether it closed (and how). */
async function follower(base: string, id: string, key: string) {
  const ws = new WebSocket(wsUrl(base, id), ['bearer', key]);
  await once(ws, 'open');
  const c = { ws, bytes: 0, closed: null as null | { code: number; reason: string } };
  ws.on('message', (data: Buffer) => (c.bytes += data.byteLength));
  ws.on('close', (code, reason) => (c.closed = { code, reason: String(reason) }));
  return c;
}

/** Resolves once `c` got `bytes` bytes or more (rejects if it closes first). */
function reach(c: Awaited<ReturnType<typeof follower>>, bytes: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (c.bytes >= bytes) done(resolve);
    };
    const closed = () => done(() => reject(new Error(`closed at ${c.bytes} bytes`)));
    const done = (then: () => void) => {
      c.ws.off('message', check);
      c.ws.off('close', closed);
      then();
    };
    c.ws.on('message', check);
    c.ws.on('close', closed);
    check();
  });
}

describe('bytes queued per tenant on event streams', { timeout: 120_000 }, () => {
  let h: Harness;
  let writerRedis: Redis;
  before(async () => {
    h = await startHarness({
      redis: await startTestRedis({ appendonly: false }),
      env: {
        API_KEYS: 'acme:key-acme,globex:key-globex',
        EVENT_LOG_MAX: '100000',
        // Far above what this test writes to any one stream: only the tenant's bound can cut.
        WS_MAX_BUFFER_BYTES: String(64 * MB),
        TENANT_MAX_STREAM_BUFFERED_BYTES: String(LIMIT),
      },
    });
    writerRedis = new Redis(h.redis.url);
  });
  after(async () => {
    writerRedis?.disconnect();
    await h.close();
    await h.redis.stop();
  });

  it("cuts a tenant's readers that stop reading once together they hold its bound, and no one else", async () => {
    const acme = h.api.as('key-acme');
    const a = (await acme.post('/v1/sessions', { start: false })).body.id as string;
    const g = (await h.api.as('key-globex').post('/v1/sessions', { start: false })).body.id as string;
    // Another replica's relay writes the events, so this process only fans them out.
    const writer = new SessionStore(writerRedis, { eventLogMax: 100_000 });
    const text = 'x'.repeat(EVENT_BYTES - 200);
    const batch: Array<[string, string]> = Array.from({ length: 8 }, () => [
      'stream.event',
      JSON.stringify({
        iteration: 1,
        event: { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } },
      }),
    ]);
    const batchText = batch.length * text.length;

    const paused = await Promise.all([0, 1, 2, 3].map(() => follower(h.service.url, a, 'key-acme')));
    for (const p of paused) (p.ws as any)._socket.pause();
    const reading = await follower(h.service.url, a, 'key-acme');
    const neighbour = await follower(h.service.url, g, 'key-globex');
    (neighbour.ws as any)._socket.pause();

    // The other tenant's reader holds half the bound: under its own tenant's, so it stays.
    for (let n = 0; n * batchText < LIMIT / 2; n++) await writer.appendEvents(g, batch);

    const hub = h.service.app.eventsHub;
    const cutSessions: string[] = [];
    const onCut = (id: string) => cutSessions.push(id);
    hub.on('slow-reader', onCut);
    // Without the tenant's bound each paused reader would hold all of this (under WS_MAX_BUFFER_BYTES): no cut.
    // (How much the kernel takes into each paused socket's buffers first depends on the host's settings.)
    const most = 48 * MB;
    let written = 0;
    let most_held = 0;
    for (let n = 1; cutSessions.length < paused.length && written < most; n++) {
      await writer.appendEvents(a, batch);
      written += batchText;
      // The batch is fanned out to every follower at once: by the time the reader that keeps up has it, the
      // others were written to, and counted.
      await reach(reading, n * batchText);
      most_held = Math.max(most_held, hub.buffers.total('acme'));
    }
    hub.off('slow-reader', onCut);
    assert.deepEqual(
      cutSessions,
      paused.map(() => a),
      `cut ${cutSessions.length} of ${paused.length} after ${written / MB} MB`,
    );
    // What the process held for the tenant's streams never stayed over the bound.
    assert.ok(most_held <= LIMIT, `held ${most_held} bytes`);
    assert.equal(hub.buffers.total('acme'), 0);

    // The cut readers get what was queued, then 1013.
    for (const p of paused) (p.ws as any)._socket.resume();
    for (const p of paused) {
      if (!p.closed) await once(p.ws, 'close');
      assert.deepEqual(p.closed, { code: 1013, reason: 'slow_reader' });
    }
    assert.equal(reading.closed, null);
    assert.equal(neighbour.closed, null);
    (neighbour.ws as any)._socket.resume();
    await reach(neighbour, LIMIT / 2);
    assert.equal(neighbour.closed, null);
    reading.ws.close();
    neighbour.ws.close();
  });

  it("counts a connection's answers to its own frames: one that sends frames and never reads is cut", async () => {
    const acme = h.api.as('key-acme');
    const id = (await acme.post('/v1/sessions', { start: false })).body.id as string;
    const c = await follower(h.service.url, id, 'key-acme');
    // Replayed what the log holds, then live on an idle session: from now on only its own answers are written to it.
    for (const deadline = Date.now() + 10_000; h.service.app.eventsHub.counts().live < 1;) {
      assert.ok(Date.now() < deadline, 'the follower went live');
      await new Promise((r) => setTimeout(r, 10));
    }
    (c.ws as any)._socket.pause();
    const cut = once(h.service.app.eventsHub, 'slow-reader');
    let isCut = false;
    void cut.then(() => (isCut = true));
    // Each binary frame is answered at once with an `invalid_frame` error frame (~100 bytes).
    const one = Buffer.from([1]);
    let sent = 0;
    while (!isCut && sent < 1_000_000) {
      for (let i = 0; i < 4999; i++) c.ws.send(one, { binary: true });
      // The chunk's last frame written to the socket: the service reads them while the next chunk is built.
      await new Promise((r) => c.ws.send(one, { binary: true }, r));
      sent += 5000;
    }
    assert.ok(isCut, `not cut after ${sent} frames`);
    assert.equal(h.service.app.eventsHub.buffers.total('acme'), 0);
    c.ws.terminate();
  });

  it('a stream that ends on its last live event (as a chat stream does) is not counted after it closed', async () => {
    const id = (await h.api.as('key-acme').post('/v1/sessions', { start: false })).body.id as string;
    const hub = h.service.app.eventsHub;
    const writer = new SessionStore(writerRedis, { eventLogMax: 1000 });
    const subs: Subscription[] = [];
    for (let i = 0; i < 5; i++) {
      // Its client has 50 kB not yet taken; the run's end closes the stream from inside the write, and the send
      // still says it went (routes/chat.ts: the translator's `done`).
      const sink: Sink = {
        send: (ev) => {
          if (ev.json.includes('"the_end":true')) subs[i]?.close();
          return true;
        },
        buffered: () => 50_000,
        ready: () => true,
        expired() {},
        gone() {},
        failed() {},
        shutdown() {},
      };
      subs.push(hub.subscribe(id, START, sink, 'acme'));
    }
    for (const deadline = Date.now() + 10_000; !subs.every((s) => s.live);) {
      assert.ok(Date.now() < deadline, 'the subscriptions went live');
      await new Promise((r) => setTimeout(r, 10));
    }
    await writer.appendEvents(id, [['stream.event', JSON.stringify({ the_end: true })]]);
    for (const deadline = Date.now() + 10_000; !subs.every((s) => s.closed);) {
      assert.ok(Date.now() < deadline, 'the subscriptions closed');
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(hub.buffers.total('acme'), 0);
  });
});
