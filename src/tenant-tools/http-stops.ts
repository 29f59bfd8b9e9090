/**
 * The tenants' `stop` channels on the subscriber connection, heard by the HTTP caller (http-caller.ts): a cancel or
 * delete on any replica settles its session's calls (tasks.ts `settle`), and settle-9.lua publishes the offer id of
 * each http call it finds leased on the call's tenant's channel; the replica running that offer's try aborts it at
 * once (its connection closed, its slot freed), instead of at the try's next heartbeat (a third of
 * TOOL_TASK_LEASE_MS). The heartbeat still stops a try whose message was lost (published while this connection was
 * down, or by a settle that failed).
 *
 * Bounded: a channel is subscribed only while this replica has a try of its tenant in flight (so at most
 * HTTP_CALLS_MAX channels), one SUBSCRIBE per tenant whatever its number of tries; a message is one offer id.
 */
import { channelName } from '../store/keys.js';
import { COMMAND_TIMEOUT_MS } from '../plugins/redis.js';
import type { RedisClient } from '../store/lua-commands.js';
import { stopChannel } from './keys.js';

/** A subscribed `stop` channel: the tries of its tenant in flight here by offer id, and its SUBSCRIBE. */
interface Channel {
  tries: Map<string, AbortController>;
  subscribed: Promise<unknown>;
}

export class HttpStops {
  private readonly channels = new Map<string, Channel>();

  constructor(private readonly sub: RedisClient) {
    sub.on('message', this.onMessage);
  }

  private readonly onMessage = (channel: string, offer: string): void => {
    this.channels.get(channel)?.tries.get(offer)?.abort();
  };

  /**
   * Aborts `stop` when the offer's call is cancelled; resolves once the tenant's channel is subscribed (false when
   * the SUBSCRIBE failed: the try is then stopped by its heartbeat only). Watch before reading whether the session
   * waits for the call: a cancel settles its calls after it changed the session, so a message published before the
   * SUBSCRIBE took effect is about a call the read then finds no longer awaited.
   */
  async watch(tenant: string, offer: string, stop: AbortController): Promise<boolean> {
    const name = channelName(this.sub, stopChannel(tenant));
    let ch = this.channels.get(name);
    if (!ch) {
      const fresh: Channel = { tries: new Map(), subscribed: this.sub.subscribe(name) };
      // A failed SUBSCRIBE is not kept: the tenant's next try subscribes again.
      fresh.subscribed.catch(() => {
        if (this.channels.get(name) === fresh) this.channels.delete(name);
      });
      this.channels.set(name, (ch = fresh));
    }
    ch.tries.set(offer, stop);
    // Waited on for COMMAND_TIMEOUT_MS at most (the subscriber connection has no command timeout of its own): a
    // stalled SUBSCRIBE would otherwise hold the try, and its slot, before its heartbeat starts. Past it the try goes
    // on as before this channel existed, stopped by its heartbeat, and is still aborted by a message once the
    // SUBSCRIBE lands.
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), COMMAND_TIMEOUT_MS);
    });
    try {
      return await Promise.race([ch.subscribed.then(() => true as const), late]);
    } catch {
      this.unwatch(tenant, offer);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The try ended: its offer is forgotten, and the channel unsubscribed after the tenant's last try here. */
  unwatch(tenant: string, offer: string): void {
    const name = channelName(this.sub, stopChannel(tenant));
    const ch = this.channels.get(name);
    if (!ch?.tries.delete(offer) || ch.tries.size > 0) return;
    this.channels.delete(name);
    void this.sub.unsubscribe(name).catch(() => {});
  }

  /** Stops hearing the channels (the connection itself belongs to the redis plugin). */
  close(): void {
    this.sub.off('message', this.onMessage);
  }
}
