import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Pipeline, Redis } from 'ioredis';
import { StoreUnavailable } from '../errors.js';

/**
 * Errors of the Redis client that mean the store is unreachable, as opposed to a bug: connection and timeout errors of
 * a single Redis (and the commands src/redis/health.ts refuses while Redis does not answer), and what a Redis Cluster answers while a master is down or the cluster is failing over (ioredis
 * follows MOVED/ASK/TRYAGAIN/CLUSTERDOWN itself; one that reaches us means it gave up). Routes answer these with 503
 * `store_unavailable`; the engine waits them out or leaves the run for recovery, never fails a session for them.
 * Redis out of memory (`-OOM`, maxmemory reached under noeviction), a read-only replica (`-READONLY`) and a Redis
 * loading its dataset (`-LOADING`) are the store refusing writes for a while: the same 503, with Retry-After.
 */
const STORE_DOWN =
  /Command timed out|Redis is not answering|Connection is closed|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EPIPE|Stream isn't writeable|enableOfflineQueue|^LOADING|^OOM |OOM command not allowed|^BUSY |^MASTERDOWN|^READONLY|^CLUSTERDOWN|^TRYAGAIN|^MOVED |^ASK |Too many Cluster redirections|None of startup nodes|Cluster is (disconnected|disconnecting|ended)|Node is disconnected|Cluster isn't ready|Failed to refresh slots cache/i;

/** Only the boundary below asks this: everything above it sees `StoreUnavailable`. */
function isStoreDown(err: unknown): boolean {
  if (err instanceof StoreUnavailable) return true;
  if (!(err instanceof Error)) return false;
  if (err.name === 'MaxRetriesPerRequestError' || STORE_DOWN.test(err.message)) return true;
  // A MULTI that Redis discarded (EXECABORT) because it refused a command as it was queued (OOM, READONLY, …):
  // ioredis gives the refusals as `previousErrors`.
  const previous: unknown = Reflect.get(err, 'previousErrors');
  return Array.isArray(previous) && previous.some(isStoreDown);
}

/** Redis refused a write because maxmemory is reached (noeviction); also as a script's error. */
export function isOutOfMemory(err: unknown): boolean {
  if (err instanceof StoreUnavailable) return isOutOfMemory(err.cause);
  return err instanceof Error && /^OOM |OOM command not allowed/.test(err.message);
}

/** Throws `err` as the store's domain error when it means the store is down (else as it is). Shared by every call. */
function rethrow(err: unknown): never {
  throw isStoreDown(err) && !(err instanceof StoreUnavailable) ? new StoreUnavailable(err) : err;
}

/** Commands ioredis sends on its own after a reconnect (its ready handler: `select`, the subscriptions). */
const RESUBSCRIBED = new Set(['subscribe', 'psubscribe', 'ssubscribe', 'select']);

/**
 * The store boundary: `target[name]`, a method of a Redis client that sends a command, redefined so that its promise
 * rejects with `StoreUnavailable` (the client's error as `cause`) when Redis is down or refuses writes; any other
 * error (a script's, WRONGTYPE, NOSCRIPT…) goes through as it is. It wraps the method a caller calls, not ioredis's
 * `Command`: ioredis reads the messages of its commands' errors itself (a Cluster's MOVED/ASK/CLUSTERDOWN retries,
 * the ready check, a script's NOSCRIPT), so they must reach it unchanged. Cost per call: the rest array and one
 * derived promise (no closure). A call with a node-style callback (ioredis's own AUTH and ready check,
 * @fastify/rate-limit's script) gets the client's error as it is. `multi()` and `pipeline()` give a pipeline whose
 * `exec` is guarded the same way (the errors in its `[err, result]` rows are the commands' own answers).
 */
function guard(target: object, name: string): void {
  const method: unknown = Reflect.get(target, name);
  if (typeof method !== 'function') return;
  const resubscribed = RESUBSCRIBED.has(name.replace(/Buffer$/, ''));
  Object.defineProperty(target, name, {
    configurable: true,
    writable: true,
    value: function guarded(this: unknown, ...args: unknown[]): unknown {
      const out: unknown = Reflect.apply(method, this, args);
      if (out instanceof Promise) {
        if (typeof args.at(-1) === 'function') return out;
        const derived = out.then(undefined, rethrow);
        // ioredis calls these itself after a reconnect and drops their promise: a connection lost again (or quit)
        // before the answer would leave the derived promise's rejection unhandled. Callers that await it still get it.
        if (resubscribed) derived.catch(() => {});
        return derived;
      }
      if (out instanceof Pipeline) guardExec(out);
      return out;
    },
  });
}

function guardExec(pipeline: Pipeline): void {
  const exec: unknown = Reflect.get(pipeline, 'exec');
  if (typeof exec !== 'function') return;
  // ioredis calls `exec` again itself to retry a pipeline (a Cluster's redirections); the retry answers the promise
  // the caller already holds, so it gets the same guarded promise (a second one would be left unhandled).
  let guarded: Promise<unknown> | undefined;
  Object.defineProperty(pipeline, 'exec', {
    configurable: true,
    writable: true,
    value: (...args: unknown[]): unknown => {
      const out: unknown = Reflect.apply(exec, pipeline, args);
      if (!(out instanceof Promise) || typeof args[0] === 'function') return out;
      return (guarded ??= out.then(undefined, rethrow));
    },
  });
}

type LuaCommand = Parameters<Redis['defineCommand']>[1];

/**
 * The service's Redis client (src/plugins/redis.ts `createRedis`; both connections): every command, Lua scripts
 * defined on it included, fails with `StoreUnavailable` when the store is down (see `guard`). So the stores, the
 * engine and the routes never see a raw connection error of a command; only the clients' `error` events (and the
 * health probe's own PING, src/redis/health.ts) still carry them.
 */
export class StoreRedis extends Redis {
  override defineCommand(name: string, definition: LuaCommand): void {
    super.defineCommand(name, definition);
    guard(this, name);
    guard(this, `${name}Buffer`);
  }
}

/** A Redis Cluster client speaking the store's errors (see StoreRedis). */
export class StoreCluster extends Cluster {
  override defineCommand(name: string, definition: LuaCommand): void {
    super.defineCommand(name, definition);
    guard(this, name);
    guard(this, `${name}Buffer`);
  }
}

for (const proto of [StoreRedis.prototype, StoreCluster.prototype]) {
  for (const command of proto.getBuiltinCommands()) {
    guard(proto, command);
    guard(proto, `${command}Buffer`);
  }
  for (const method of ['call', 'callBuffer', 'pipeline']) guard(proto, method);
}

/**
 * Runs `load` again while it fails with `StoreUnavailable`, for at most `forMs`, then throws what it last threw. For
 * the loads a boot waits on: a Redis that stalls for a moment (the health probe refuses every command while it does)
 * must not fail a boot; one that stays down does, and the orchestrator starts the process again.
 */
export async function retryWhileUnavailable<T>(
  load: () => Promise<T>,
  forMs: number,
  onRetry: (err: StoreUnavailable) => void,
): Promise<T> {
  const deadline = Date.now() + forMs;
  for (;;) {
    try {
      return await load();
    } catch (err) {
      if (!(err instanceof StoreUnavailable) || Date.now() >= deadline) throw err;
      onRetry(err);
      await sleep(RETRY_EVERY_MS);
    }
  }
}

const RETRY_EVERY_MS = 250;
