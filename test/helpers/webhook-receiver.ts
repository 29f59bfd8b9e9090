import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

/**
 * A real HTTP webhook receiver on loopback, as a customer would write one: every request is verified with the
 * `standardwebhooks` verifier and deduplicated by `webhook-id`. Its behaviour is switched by the test:
 * `fail` answers 500, `hang` holds the request open unanswered, `down` resets the connection, `accept` answers 204.
 */
export type Mode = 'accept' | 'fail' | 'hang' | 'down';

export interface Received {
  id: string;
  body: { id: string; session_id: string | null; type: string; revision?: number; data: any };
}

export class WebhookReceiver {
  mode: Mode = 'accept';
  /** Requests of any kind, in arrival order. */
  requests = 0;
  /** Requests whose signature did not verify. */
  invalid = 0;
  /** Accepted once per webhook-id, in order. */
  readonly accepted: Received[] = [];
  /** Deliveries of an id already accepted (at least once allows them; the receiver drops them). */
  duplicates = 0;
  private readonly seen = new Set<string>();
  private readonly held = new Set<http.ServerResponse>();
  private readonly waiters: Array<() => void> = [];
  private server!: http.Server;
  private verifier: Webhook | undefined;

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  get heldCount(): number {
    return this.held.size;
  }

  setSecret(secret: string): void {
    this.verifier = new Webhook(secret);
  }

  /** Resolves once `pred` holds (checked after every request). */
  until(pred: () => boolean): Promise<void> {
    if (pred()) return Promise.resolve();
    return new Promise((resolve) => {
      const check = () => {
        if (pred()) resolve();
        else this.waiters.push(check);
      };
      this.waiters.push(check);
    });
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  async start(): Promise<void> {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        this.requests++;
        const mode = this.mode;
        try {
          if (mode === 'down') {
            req.socket.destroy();
            return;
          }
          if (mode === 'fail') {
            res.writeHead(500).end('nope');
            return;
          }
          if (mode === 'hang') {
            this.held.add(res);
            res.on('close', () => this.held.delete(res));
            return;
          }
          const payload = Buffer.concat(chunks).toString('utf8');
          let body: Received['body'];
          try {
            body = this.verifier!.verify(payload, req.headers as Record<string, string>) as Received['body'];
          } catch {
            this.invalid++;
            res.writeHead(400).end('bad signature');
            return;
          }
          const id = String(req.headers['webhook-id']);
          if (this.seen.has(id)) this.duplicates++;
          else {
            this.seen.add(id);
            this.accepted.push({ id, body });
          }
          res.writeHead(204).end();
        } finally {
          this.wake();
        }
      });
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
  }

  /** Answers the held requests with 500 (their senders are usually gone by then). */
  releaseHeld(): void {
    for (const res of this.held) res.writeHead(500).end();
    this.held.clear();
  }

  async close(): Promise<void> {
    this.releaseHeld();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
