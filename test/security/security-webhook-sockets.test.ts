/**
 * Issue 22 item 1: a webhook receiver cannot pin the service's sockets. A real receiver on loopback answers 200 and
 * then trickles its body a byte at a time, forever: each attempt is cut at WEBHOOK_TIMEOUT_MS (its socket destroyed),
 * at most AGENT_MAX_SOCKETS sockets are open to it at once, and the kept-alive sockets of a webhook are closed when
 * it is deleted or its URL changes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { AGENT_MAX_SOCKETS } from '../../src/webhooks/attempt.js';

/** A receiver counting its open connections; `trickle` answers 200 and never ends the body. */
class Receiver {
  mode: 'trickle' | 'accept' = 'trickle';
  open = 0;
  maxOpen = 0;
  requests = 0;
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly waiters: Array<() => void> = [];
  private server!: http.Server;

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  until(pred: () => boolean, timeoutMs: number, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`timed out: ${what} (open ${this.open})`)), timeoutMs);
      const check = () => {
        if (pred()) {
          clearTimeout(t);
          resolve();
        } else this.waiters.push(check);
      };
      check();
    });
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  async start(): Promise<void> {
    this.server = http.createServer({ keepAliveTimeout: 120_000 }, (req, res) => {
      req.resume();
      req.on('end', () => {
        this.requests++;
        this.wake();
        if (this.mode === 'accept') {
          res.writeHead(204).end();
          return;
        }
        res.writeHead(200, { 'content-type': 'text/plain' });
        const t = setInterval(() => res.write('x'), 50);
        this.timers.add(t);
        res.on('close', () => {
          clearInterval(t);
          this.timers.delete(t);
        });
      });
    });
    this.server.on('connection', (s: Socket) => {
      this.sockets.add(s);
      this.open++;
      this.maxOpen = Math.max(this.maxOpen, this.open);
      this.wake();
      s.on('close', () => {
        this.sockets.delete(s);
        this.open--;
        this.wake();
      });
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

describe('webhook sockets are bounded', { timeout: 60_000 }, () => {
  let h: Harness;
  let api: Api;
  const receiver = new Receiver();

  before(async () => {
    await receiver.start();
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-acme',
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_POLL_MS: '50',
        WEBHOOK_TIMEOUT_MS: '700',
        WEBHOOK_CONCURRENCY: '32',
        WEBHOOK_SECRET_KEY: Buffer.alloc(32, 7).toString('base64'),
      },
    });
    api = h.api;
  });
  after(async () => {
    await h?.close();
    await receiver.close();
  });

  it('cuts a trickling body at the deadline and opens at most AGENT_MAX_SOCKETS sockets per origin', async () => {
    receiver.mode = 'trickle';
    const w = (await api.post('/v1/webhooks', { url: receiver.url })).body;
    const n = AGENT_MAX_SOCKETS * 3;
    for (let i = 0; i < n; i++) assert.equal((await api.post(`/v1/webhooks/${w.id}/test`)).status, 202);
    await receiver.until(() => receiver.requests >= AGENT_MAX_SOCKETS, 10_000, 'first attempts');
    // Every attempt's socket is destroyed at its deadline: none stays open with the body still trickling.
    await receiver.until(() => receiver.requests >= n, 20_000, 'all attempts');
    await receiver.until(() => receiver.open === 0, 5_000, 'sockets closed at the deadline');
    assert.ok(receiver.maxOpen <= AGENT_MAX_SOCKETS, `max open ${receiver.maxOpen}`);
    const log = (await api.get(`/v1/webhooks/${w.id}/deliveries`)).body.data;
    assert.ok(log.length > 0);
    for (const e of log) assert.ok(e.duration_ms < 3000, `attempt took ${e.duration_ms} ms`);
    await api.req('DELETE', `/v1/webhooks/${w.id}`);
  });

  it('closes the kept-alive sockets of a webhook when it is deleted or its URL changes', async () => {
    receiver.mode = 'accept';
    for (const change of ['delete', 'patch'] as const) {
      const w = (await api.post('/v1/webhooks', { url: receiver.url })).body;
      const before = receiver.requests;
      await api.post(`/v1/webhooks/${w.id}/test`);
      await receiver.until(() => receiver.requests > before && receiver.open > 0, 10_000, 'delivered');
      // The receiver keeps the connection for 120 s: only the service can close it, and does so at once.
      if (change === 'delete') await api.req('DELETE', `/v1/webhooks/${w.id}`);
      else await api.req('PATCH', `/v1/webhooks/${w.id}`, { url: receiver.url.replace('/hook', '/other') });
      await receiver.until(() => receiver.open === 0, 2_000, `sockets released on ${change}`);
      if (change === 'patch') await api.req('DELETE', `/v1/webhooks/${w.id}`);
    }
  });
});
