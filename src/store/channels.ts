import type { RedisClient } from './lua-commands.js';
import {
  channelName,
  controlChannel,
  eventsChannel,
  sessionOfControlChannel,
  sessionOfEventsChannel,
  unprefixedChannel,
} from './keys.js';

/** A session channel's message, with the session it is about. */
export type ChannelListener = (sessionId: string, message: string) => void;

/**
 * The sessions' pub/sub channels on the process's subscriber connection (src/plugins/redis.ts `redisSub`): the only
 * code that subscribes to them or reads their messages. Two kinds, both named in keys.ts:
 * - `ev:{id}` events channels: the notice of each write to a session's log (src/events/notice.ts), watched by the
 *   event relay (src/events/hub.ts) while it has clients of that session;
 * - `ctl:{id}` control channels: cancel/interrupt/delete/params for the run of that session, watched by the engine
 *   while it runs the session here (published with SessionStore.publishControl).
 *
 * Guarantees (Redis pub/sub's): a message is delivered to this process if it was published after the SUBSCRIBE of
 * its channel was answered and while the connection stayed up; never twice; in publication order per channel. A
 * message published while the connection is down is lost: ioredis subscribes the channels again once it is back,
 * and `onReconnect` listeners must then read what they might have missed (the log is the source of truth).
 * Other subscribers of the same connection (webhooks' `wh:changed`) are left alone: listeners here only see the
 * two session kinds. Channel names carry the key prefix (keys.ts `channelName`).
 */
export class SessionChannels {
  private readonly eventListeners = new Set<ChannelListener>();
  private readonly controlListeners = new Set<ChannelListener>();

  constructor(private readonly sub: RedisClient) {
    sub.on('message', this.onMessage);
  }

  private readonly onMessage = (prefixed: string, message: string): void => {
    const channel = unprefixedChannel(this.sub, prefixed);
    if (channel === null) return;
    const ev = sessionOfEventsChannel(channel);
    if (ev !== null) {
      for (const l of this.eventListeners) l(ev, message);
      return;
    }
    const ctl = sessionOfControlChannel(channel);
    if (ctl !== null) for (const l of this.controlListeners) l(ctl, message);
  };

  /**
   * SUBSCRIBE `ev:{id}`. Resolves once Redis answered: every notice published from then on reaches the listeners
   * of `onEvents` (while the connection stays up). Subscribing twice is harmless (one subscription).
   */
  async watchEvents(sessionId: string): Promise<void> {
    await this.sub.subscribe(channelName(this.sub, eventsChannel(sessionId)));
  }

  /** UNSUBSCRIBE `ev:{id}`; never throws (a connection that is down has no subscription to drop). */
  async unwatchEvents(sessionId: string): Promise<void> {
    await this.sub.unsubscribe(channelName(this.sub, eventsChannel(sessionId))).catch(() => {});
  }

  /** SUBSCRIBE `ctl:{id}`; resolves once Redis answered (see watchEvents). */
  async watchControl(sessionId: string): Promise<void> {
    await this.sub.subscribe(channelName(this.sub, controlChannel(sessionId)));
  }

  /** UNSUBSCRIBE `ctl:{id}`; never throws. */
  async unwatchControl(sessionId: string): Promise<void> {
    await this.sub.unsubscribe(channelName(this.sub, controlChannel(sessionId))).catch(() => {});
  }

  /** Listens to every events channel watched here; returns the function that stops listening. */
  onEvents(listener: ChannelListener): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  /** Listens to every control channel watched here; returns the function that stops listening. */
  onControl(listener: ChannelListener): () => void {
    this.controlListeners.add(listener);
    return () => this.controlListeners.delete(listener);
  }

  /**
   * Called each time the subscriber connection is ready again after it was lost: messages published while it was
   * down were lost. Not on its first `ready`: before it no subscription had taken effect, so none could miss a
   * message (a channel reads its log's newest id only once its SUBSCRIBE is acknowledged). ioredis subscribes the
   * channels again on its own right after `ready`, so a listener that reads the log at once may read before the
   * subscription is back; it reads again a little later (see the hub).
   */
  onReconnect(listener: () => void): () => void {
    let connected = this.sub.status === 'ready';
    const onReady = () => {
      if (connected) listener();
      connected = true;
    };
    this.sub.on('ready', onReady);
    return () => this.sub.off('ready', onReady);
  }

  /** Stops delivering messages (the connection itself belongs to the redis plugin). */
  close(): void {
    this.sub.off('message', this.onMessage);
    this.eventListeners.clear();
    this.controlListeners.clear();
  }
}
