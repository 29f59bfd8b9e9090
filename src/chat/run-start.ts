/**
 * Where a session's current run starts in its event log (src/chat/lua/run-start-1.lua), so a resumed chat stream
 * replays the run from its start. The script is defined on the store's client as `chatRunStart`.
 */
import type { Result } from 'ioredis';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import { sessionKeys } from '../store/keys.js';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** run-start-1.lua: the id just before the run's `session.status` event ('0-0': the log's start), or null. */
    chatRunStart(events: string, maxScanned: number): Result<string | null, Context>;
  }
}

const defined = new WeakSet<RedisClient>();

/** The cursor to replay the session's current run after, or null when no run is active according to its log. */
export async function runStartCursor(redis: RedisClient, sessionId: string, maxScanned: number) {
  if (!defined.has(redis)) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'chat');
    defined.add(redis);
  }
  return redis.chatRunStart(sessionKeys(sessionId).events, Math.max(1, maxScanned));
}
