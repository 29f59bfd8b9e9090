/**
 * The tenants' `wake` channels on the subscriber connection: a long-polling claim (service.ts) listens on its
 * tenant's channel for calls of its tools; one SUBSCRIBE per channel, whatever the number of claims listening.
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

  constructor(
    readonly channel: string,
    private readonly tools: readonly string[],
  ) {}

  readonly hear = (tool: string): void => {
    if (tool !== '' && !this.tools.includes(tool)) return;
    this.heard = true;
    this.ring?.();
  };

  clear(): void {
    this.heard = false;
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
  ears: Set<(tool: string) => void>;
  subscribed: Promise<unknown>;
}

export class WakeChannels {
  private readonly channels = new Map<string, Channel>();

  constructor(private readonly sub: RedisClient) {
    sub.on('message', this.onMessage);
  }

  private readonly onMessage = (channel: string, tool: string): void => {
    for (const ear of this.channels.get(channel)?.ears ?? []) ear(tool);
  };

  /** Listens on the tenant's `wake` channel for calls of `tools`; resolves once the channel is subscribed. */
  async listen(tenant: string, tools: readonly string[]): Promise<Wake> {
    const wake = new Wake(channelName(this.sub, wakeChannel(tenant)), tools);
    let ch = this.channels.get(wake.channel);
    if (!ch) {
      const fresh: Channel = { ears: new Set(), subscribed: this.sub.subscribe(wake.channel) };
      this.channels.set(wake.channel, (ch = fresh));
    }
    ch.ears.add(wake.hear);
    try {
      // Not only the first listener: a message published before the SUBSCRIBE is in effect reaches nobody.
      await ch.subscribed;
    } catch (err) {
      await this.unlisten(wake);
      throw err;
    }
    return wake;
  }

  async unlisten(wake: Wake): Promise<void> {
    const ch = this.channels.get(wake.channel);
    if (!ch?.ears.delete(wake.hear) || ch.ears.size > 0) return;
    this.channels.delete(wake.channel);
    await this.sub.unsubscribe(wake.channel).catch(() => {});
  }

  /** Stops hearing the channels; every claim listening is woken (with `''`: the service stops). */
  close(): void {
    this.sub.off('message', this.onMessage);
    for (const ch of this.channels.values()) for (const ear of ch.ears) ear('');
  }
}
