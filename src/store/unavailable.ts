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
  /Command timed out|Redis is not answering|Connection is closed|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EPIPE|Stream isn't writeable|enableOfflineQueue|^LOADING|^OOM |OOM command not allowed|^BUSY|^MASTERDOWN|^READONLY|^CLUSTERDOWN|^TRYAGAIN|^MOVED |^ASK |Too many Cluster redirections|None of startup nodes|Cluster is (disconnected|disconnecting|ended)|Node is disconnected|Cluster isn't ready|Failed to refresh slots cache/i;

export function isStoreDown(err: unknown): boolean {
  if (err instanceof StoreUnavailable) return true;
  if (!(err instanceof Error)) return false;
  return err.name === 'MaxRetriesPerRequestError' || STORE_DOWN.test(err.message);
}

/** Redis refused a write because maxmemory is reached (noeviction); also as a script's error. */
export function isOutOfMemory(err: unknown): boolean {
  if (err instanceof StoreUnavailable) return isOutOfMemory(err.cause);
  return err instanceof Error && /^OOM |OOM command not allowed/.test(err.message);
}

/** `err` as the store's domain error when it means the store is unreachable (StoreUnavailable, with `err` as cause). */
export function asStoreError(err: unknown): unknown {
  return isStoreDown(err) && !(err instanceof StoreUnavailable) ? new StoreUnavailable(err) : err;
}
