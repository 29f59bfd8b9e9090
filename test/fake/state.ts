/**
 * The mutable state of one running fake, shared by its request handlers: the script queue, the handler, the pacing,
 * the stored threads, the recorded requests, and the timers and waiters to clear on close.
 */
import type { FakeHandler, FakeReply, FakeRequest } from '../../src/offline/wire.js';
import { ThreadStore } from '../../src/offline/threads.js';

export interface FakeSettings {
  defaultHandler: FakeHandler;
  startPacing: number;
  record: boolean;
  strictAlternation: boolean;
  threadsSupported: boolean;
  maxThreads: number;
  apiKey: string | undefined;
}

export class FakeState {
  handler: FakeHandler;
  pacing: number;
  queue: FakeReply[] = [];
  readonly threads: ThreadStore;
  /** Requests received since the start or the last reset (recorded or not). */
  received = 0;
  closed = false;
  readonly requests: FakeRequest[] = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly waiters = new Set<{ n: number; resolve: () => void }>();
  /** Streams held at their `pauseAfterEvents`: what sends the rest of each. */
  private readonly paused = new Set<() => void>();

  constructor(readonly settings: FakeSettings) {
    this.handler = settings.defaultHandler;
    this.pacing = settings.startPacing;
    this.threads = new ThreadStore(settings.maxThreads);
  }

  /** Runs `fn` after `ms`, unless the fake closes first. */
  later(fn: () => void, ms: number): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      fn();
    }, ms);
    this.timers.add(timer);
  }

  /** Holds a stream until `resume()` (or a reset or close, so that nothing stays held): `rest` sends the rest. */
  pause(rest: () => void): void {
    this.paused.add(rest);
  }

  get held(): number {
    return this.paused.size;
  }

  /** Sends the rest of every stream held now. */
  resume(): void {
    const held = [...this.paused];
    this.paused.clear();
    for (const rest of held) rest();
  }

  /** Records a request and wakes the waiters it satisfies; returns its arrival index. */
  noteRequest(fr: FakeRequest): number {
    const index = this.received++;
    if (this.settings.record) this.requests.push(fr);
    for (const waiter of this.waiters) {
      if (this.received >= waiter.n) {
        this.waiters.delete(waiter);
        waiter.resolve();
      }
    }
    return index;
  }

  /** Resolves with `requests` once `n` requests have arrived; rejects after `timeoutMs`. */
  waitForRequests(n: number, timeoutMs: number): Promise<FakeRequest[]> {
    if (this.received >= n) return Promise.resolve(this.requests);
    return new Promise((resolve, reject) => {
      const waiter = {
        n,
        resolve: () => {
          clearTimeout(timer);
          resolve(this.requests);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`fake Anthropic: ${this.received} of ${n} requests after ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.add(waiter);
    });
  }

  reset(): void {
    this.queue = [];
    this.requests.length = 0;
    this.received = 0;
    this.handler = this.settings.defaultHandler;
    this.pacing = this.settings.startPacing;
    this.threads.clear();
    this.resume();
  }

  close(): void {
    this.closed = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    // A held stream's rest sees the fake closed and ends it.
    this.resume();
  }
}
