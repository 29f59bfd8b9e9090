/**
 * The tenants' `wake` channels on the subscriber connection: a long-polling claim (service.ts) listens on its
 * tenant's channel for calls of its tools; one SUBSCRIBE per channel, whatever the number of claims listening.
 *
 * A message (one per call queued or offered again, naming its queue) wakes ONE claim of this process that waits for
 * that tool — not all of them, which would each run a claim script for one call. A claim that ends without having
 * claimed since a wake it was given (it ended with tasks, was aborted, or its last claim was full: it may have left
 * the call) passes that wake on to another claim of the channel (`pass`), so no call waits for a timeout while a
 * claim of its tool is listening.
 */
import { channelName } from '../store/keys.js';
import type { RedisClient } from '../store/lua-commands.js';
import { wakeChannel } from './keys.js';

/**
 * A long-polling claim's ear on its tenant's `wake` channel: `heard` says a call of its tools (or `''`: the service
 * stops) was published since the last `clear()`.
 */
export class Wake {
  heard = false;
  private ring: (() => void) | null = null;
  /** Tools it was woken for since `clear()`, and those of the wakes its latest claim (after `clear()`) answers. */
  private pending = new Set<string>();
  private answered = new Set<string>();

  constructor(
    readonly channel: string,
    private readonly tools: readonly string[],
  ) {}

  wants(tool: string): boolean {
    return tool === '' || this.tools.includes(tool);
  }

  /** Whether it waits (no claim of its own running): a wake given to it is acted on at once. */
  get waiting(): boolean {
    return this.ring !== null;
  }

  readonly hear = (tool: string): void => {
    if (!this.wants(tool)) return;
    if (tool !== '') this.pending.add(tool);
    this.heard = true;
    this.ring?.();
  };

  /** A claim starts: it answers the wakes heard so far. */
  clear(): void {
    this.heard = false;
    this.answered = this.pending;
    this.pending = new Set();
  }

  /**
   * The tools whose wakes it leaves unanswered as it ends: those heard since its last claim began, and, when that
   * claim was full (`max` calls: more may be left), the ones it answered.
   */
  leftover(full: boolean): string[] {
    return [...this.pending, ...(full ? this.answered : [])];
  }

  /** Resolves once heard (at once when heard since `clear()`), after `ms`, or on abort. */
  wait(ms: number, signal: AbortSignal): Promise<void> {
    if (this.heard || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.ring = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
      this.ring = done;
    });
  }
}

/** A subscribed `wake` channel: the claims listening on it, and its SUBSCRIBE (each listener waits for it). */
interface Channel {
  ears: Set<Wake>;
  subscribed: Promise<unknown>;
}

export class WakeChannels {
  private readonly channels = new Map<string, Channel>();

  constructor(private readonly sub: RedisClient) {
    sub.on('message', this.onMessage);
  }

  private readonly onMessage = (channel: string, tool: string): void => {
    this.wakeOne(channel, tool);
  };

  /**
   * Wakes one claim of `channel` listening for `tool`: one that waits first (oldest first), else one whose claim
   * runs and has not heard since it began (it claims again right after); none when every such claim has heard
   * already (each claims again anyway).
   */
  private wakeOne(channel: string, tool: string): void {
    let busy: Wake | null = null;
    for (const ear of this.channels.get(channel)?.ears ?? []) {
      if (ear.heard || !ear.wants(tool)) continue;
      if (ear.waiting) return ear.hear(tool);
      busy ??= ear;
    }
    busy?.hear(tool);
  }

  /** Claims of `tenant` listening on this process. */
  listening(tenant: string): number {
    return this.channels.get(channelName(this.sub, wakeChannel(tenant)))?.ears.size ?? 0;
  }

  /** Listens on the tenant's `wake` channel for calls of `tools`; resolves once the channel is subscribed. */
  async listen(tenant: string, tools: readonly string[]): Promise<Wake> {
    const wake = new Wake(channelName(this.sub, wakeChannel(tenant)), tools);
    let ch = this.channels.get(wake.channel);
    if (!ch) {
      const fresh: Channel = { ears: new Set(), subscribed: this.sub.subscribe(wake.channel) };
      this.channels.set(wake.channel, (ch = fresh));
    }
    ch.ears.add(wake);
    try {
      // Not only the first listener: a message published before the SUBSCRIBE is in effect reaches nobody.
      await ch.subscribed;
    } catch (err) {
      await this.unlisten(wake, false);
      throw err;
    }
    return wake;
  }

  /** Stops listening; `full`: the claim's last claim took `max` calls (see `Wake.leftover`). */
  async unlisten(wake: Wake, full: boolean): Promise<void> {
    const ch = this.channels.get(wake.channel);
    if (!ch?.ears.delete(wake)) return;
    for (const tool of wake.leftover(full)) this.wakeOne(wake.channel, tool);
    if (ch.ears.size > 0) return;
    this.channels.delete(wake.channel);
    await this.sub.unsubscribe(wake.channel).catch(() => {});
  }

  /** Wakes every claim listening (with `''`: the service stops), whatever its tools. */
  wakeAll(): void {
    for (const ch of this.channels.values()) for (const ear of ch.ears) ear.hear('');
  }

  /** Stops hearing the channels; every claim listening is woken (`wakeAll`). */
  close(): void {
    this.sub.off('message', this.onMessage);
    this.wakeAll();
  }
}
