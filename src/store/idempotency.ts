import type { ClientScope } from './client-tokens.js';
import { idempotencyKey } from './keys.js';
import { defineLuaCommands, type RedisClient } from './lua-commands.js';
import './lua/commands.js';

/** What an `Idempotency-Key` holds: the request's fingerprint, and once answered, the answer. */
export interface IdempotencyRecord {
  state: 'pending' | 'done';
  fp: string;
  status?: number;
  body?: string;
  etag?: string;
  /** Fields taken out of `body`, each sealed (see `sealInRecord` in plugins/idempotency.ts). */
  sealed?: Record<string, string>;
  /** A streamed answer (POST /v1/chat): not its bytes, but where it was read from, to stream it again. */
  stream?: StreamReplay;
}

/**
 * What streams a chat answer again from the event log: the cursor it started after, the revision its mutation made
 * (older statuses are passed over), the assistant message it continued and the calls that message held, and whether
 * it ran at all.
 */
export interface StreamReplay {
  after: string;
  revision: number;
  assistant?: string | undefined;
  known: string[];
  /**
   * The mutation started no run: the answer was the session's status then (`status`, the `session.status` data,
   * kept when under 64 KiB of JSON; else the replay says the status as it is by then), not read from the log.
   */
  idle: boolean;
  status?: Record<string, unknown>;
  /** The client-token scopes the first request needed: a replay needs them too. */
  scopes: ClientScope[];
}

/**
 * How long a `pending` record lives unless the process handling its request renews it (`renew`, every
 * IN_FLIGHT_RENEW_MS while the request runs): a process that died mid-request (SIGKILL, or its answer's write lost to
 * a Redis restart) leaves the key "in progress" for at most this long, then the client's retry takes it.
 */
export const IN_FLIGHT_TTL_MS = 10_000;
export const IN_FLIGHT_RENEW_MS = 3_000;

/**
 * The records of `Idempotency-Key`s, one string key per (tenant, key hash), each with a TTL. Every method is one
 * command, atomic on its own; the first request of a key wins by `reserve` (SET NX).
 */
export class IdempotencyRecords {
  constructor(
    private readonly redis: RedisClient,
    private readonly ttlS: number,
    /** IDEMPOTENCY_MAX_BYTES_PER_TENANT: answers kept per tenant at most, in bytes (the oldest are forgotten). */
    private readonly maxBytesPerTenant: number,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'sess');
  }

  /** The record's key: the tenant and a hash of the client's key (never the key itself). */
  key(tenant: string, keyHash: string): string {
    return idempotencyKey(tenant, keyHash);
  }

  /**
   * Writes the `pending` record only if the key holds none (atomic: SET NX PX), for IN_FLIGHT_TTL_MS. True when this
   * call wrote it.
   */
  async reserve(key: string, record: IdempotencyRecord): Promise<boolean> {
    return (await this.redis.set(key, JSON.stringify(record), 'PX', IN_FLIGHT_TTL_MS, 'NX')) === 'OK';
  }

  /**
   * The request of a `pending` record still runs: its lease starts again (PEXPIRE). Sent on the connection that later
   * writes the answer (`keep`), so it never shortens the kept answer's TTL.
   */
  async renew(key: string): Promise<void> {
    await this.redis.pexpire(key, IN_FLIGHT_TTL_MS);
  }

  /** The record, or null when none is kept (never written, expired or dropped). */
  async get(key: string): Promise<IdempotencyRecord | null> {
    const raw = await this.redis.get(key);
    // Written by this class only.
    return raw ? JSON.parse(raw) : null;
  }

  /**
   * Replaces the record with its answer, with a fresh TTL, counted in the tenant's kept bytes (one script): the
   * oldest answers of the tenant are forgotten first when it would pass its bound. The number forgotten.
   */
  async keep(tenant: string, key: string, record: IdempotencyRecord): Promise<number> {
    return this.redis.sessIdemKeep(
      key,
      idempotencyKey(tenant, '~kept'),
      idempotencyKey(tenant, '~bytes'),
      JSON.stringify(record),
      this.ttlS,
      Date.now(),
      this.maxBytesPerTenant,
    );
  }

  /** Forgets the record: the key may be used again. */
  async drop(key: string): Promise<void> {
    await this.redis.del(key);
  }
}
