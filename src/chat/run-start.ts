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

/**
 * Defines the script's command on `redis`: at boot, before any traffic (a command defined later is missing from
 * the auto-pipelines ioredis has open at that moment).
 */
export function defineChatCommands(redis: RedisClient): void {
  defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'chat');
}

/** The cursor to replay the session's current run after, or null when no run is active according to its log. */
export async function runStartCursor(redis: RedisClient, sessionId: string, maxScanned: number) {
  return redis.chatRunStart(sessionKeys(sessionId).events, Math.max(1, maxScanned));
}
