/**
 * Message threads (`message-threads-2026-08-12`): the conversations kept between turns, keyed by the id of the reply
 * that ends them (the offline model's and the fake's store; the fake's checks of a `continue` are in test/fake).
 */
import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';

export interface StoredThread {
  /** The conversation so far, ending with the reply it is keyed by. */
  messages: BetaMessageParam[];
  system: unknown;
  tools: unknown[];
  stopReason: string;
  /** Approximate JSON size of the conversation, for the token estimate. */
  chars: number;
  /** Continued once already: kept only to answer `thread_already_continued` (its `messages` are dropped). */
  continued: boolean;
  /** A request continuing it is being answered. */
  inFlight: boolean;
}

/** Stored threads, the oldest forgotten beyond `max` so a long-running fake stays bounded. */
export class ThreadStore {
  private threads = new Map<string, StoredThread>();

  constructor(private readonly max: number) {}

  get(id: string): StoredThread | undefined {
    return this.threads.get(id);
  }

  set(id: string, thread: StoredThread): void {
    this.threads.set(id, thread);
    if (this.threads.size > this.max) this.threads.delete(this.threads.keys().next().value!);
  }

  clear(): void {
    this.threads = new Map();
  }

  get size(): number {
    return this.threads.size;
  }
}
