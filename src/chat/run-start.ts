/**
 * Where the assistant message of a session's current run starts in its event log (src/chat/lua/run-start-2.lua),
 * so a resumed chat stream replays it from its start. The script is defined on the store's client as `chatRunStart`.
 */
import type { Result } from 'ioredis';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import { sessionKeys } from '../store/keys.js';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /**
     * run-start-2.lua: the replay's cursor ('0-0': the log's start), the current run's first event ('' when the
     * scan did not reach it), whether the message's beginning was found ('1') and, when the replay starts at a
     * retry's run, the live history's length before that run ('' otherwise); or null.
     */
    chatRunStart(
      events: string,
      msgs: string,
      maxScanned: number,
      agentsPause: '0' | '1',
      maxBytes: number,
    ): Result<[cursor: string, run: string, whole: '0' | '1', kept: string] | null, Context>;
  }
}

/**
 * Most bytes of the log (the entries' field values) one scan for a run's start reads. The scan is one script: every
 * entry it reads is copied whole into Redis's Lua, which serves no other tenant meanwhile (a 16 MB log of large
 * events took Redis past the health probe's second). Past it the replay starts where the scan stopped (`midRun`),
 * as when the run's start is older than the log.
 */
export const RUN_START_SCAN_BYTES = 4 * 1024 * 1024;

/**
 * Defines the script's command on `redis`: at boot, before any traffic (a command defined later is missing from
 * the auto-pipelines ioredis has open at that moment).
 */
export function defineChatCommands(redis: RedisClient): void {
  defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'chat');
}

/**
 * Where to replay the assistant message of the session's current run from (`cursor`: the message's earlier runs
 * included, those that paused for the client and those that failed or stopped and were taken up again), the id of
 * the current run's first event (`run`; undefined when the scan did not reach it), and `midRun`: the message's
 * beginning is not in the log any more or not within the scan's bounds (`maxScanned` entries, `maxBytes` bytes: the
 * replay starts at the oldest event kept or scanned, maybe inside a turn), and
 * `kept`: after a `POST …/retry`, which dropped steps the log still holds, the replay starts at the run the retry
 * started, and the message's steps before it are those of the live history's first `kept` messages (undefined when
 * the replay is the whole message as logged). Null when no run is active according to its log. `agentsPause`: the
 * session waits only for its sub-agents (its run is active, paused for the service), so the log may end with that
 * `requires_action`.
 */
export async function runStartCursor(
  redis: RedisClient,
  sessionId: string,
  maxScanned: number,
  agentsPause: boolean,
  maxBytes = RUN_START_SCAN_BYTES,
) {
  const keys = sessionKeys(sessionId);
  const found = await redis.chatRunStart(
    keys.events,
    keys.msgs,
    Math.max(1, maxScanned),
    agentsPause ? '1' : '0',
    Math.max(1, maxBytes),
  );
  if (!found) return null;
  // `run` undefined: the run began before the oldest event the log keeps (a long run, a trimmed log).
  return {
    cursor: found[0],
    run: found[1] === '' ? undefined : found[1],
    midRun: found[2] !== '1',
    kept: found[3] === '' ? undefined : Number(found[3]),
  };
}
