import { createHash } from 'node:crypto';
import { StoreUnavailable } from '../errors.js';
import type { ClientScope } from './client-tokens.js';
import { idempotencyKey } from './keys.js';
import { defineLuaCommands, type RedisClient } from './lua-commands.js';
import './lua/commands.js';

/** What an `Idempotency-Key` holds: the request's fingerprint, and once answered, the answer. */
export interface IdempotencyRecord {
  state: 'pending' | 'done';
  fp: string;
  /** A `pending` record's request (random, per request): only it gives the record up (`giveUp`). */
  owner?: string;
  status?: number;
  body?: string;
  etag?: string;
  /** Fields taken out of `body`, each sealed (see `sealInRecord` in plugins/idempotency.ts). */
  sealed?: Record<string, string>;
  /** A streamed answer (POST /v1/chat): not its bytes, but where it was read from, to stream it again. */
  stream?: StreamReplay;
}

/**
 * A decision on a call whose approval the client's message shows asked and unanswered, made elsewhere before the
 * stream's cursor (src/chat/post.ts `decidedMeanwhile`): `input`, an approval's, the input the call runs with (the
 * edited one, if edited); `reason`, a denial's; `result`, an approved call's result when it is known already (the
 * call ran while the step waited for the client's other answers).
 */
export interface DecidedCall {
  tool_use_id: string;
  name: string;
  approved: boolean;
  input?: unknown;
  reason?: string;
  result?: { content: unknown; is_error: boolean };
}

/**
 * What streams a chat answer again from the event log: the cursor it started after, the revision its mutation made
 * (older statuses are passed over), the assistant message it continued and the calls that message held, and whether
 * it ran at all.
 */
export interface StreamReplay {
  after: string;
  revision: number;
  /**
   * The revision of the write that queued the request's user message (src/chat/post.ts `Posted.own`): the replay
   * tells its own `message.queued` by it. Absent in a record kept before it was (the replay then takes the first one
   * queued after `after`, as the stream did then).
   */
  own?: number;
  assistant?: string | undefined;
  known: string[];
  /**
   * The mutation started no run: the answer was the session's status then (`status`, the `session.status` data,
   * kept when under 64 KiB of JSON; else the replay says the status as it is by then), not read from the log.
   */
  idle: boolean;
  status?: Record<string, unknown>;
  /**
   * The tenant tools' results the answer showed first (src/chat/post.ts `deliveredMeanwhile`: delivered while the
   * session waited, before the cursor), kept when under 64 KiB of JSON: a replay shows them again.
   */
  delivered?: Array<{
    tool_use_id: string;
    name: string;
    input: unknown;
    content: unknown;
    is_error: boolean;
  }>;
  /**
   * The decisions made elsewhere that the answer showed first (src/chat/post.ts `decidedMeanwhile`: approvals its
   * message showed asked and unanswered, decided before the cursor), kept when they fit beside the above in 64 KiB of
   * JSON: a replay shows them again.
   */
  decided?: DecidedCall[];
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
/** How often a record given up is tried again while Redis does not answer (see `giveUp`). */
const GIVE_UP_RETRY_MS = 200;
/**
 * How long after its give-up a record is tried again at most while Redis does not answer (see `giveUp`): a bound on
 * the `givenUp` entries and the retry timers an outage's 5xx leave behind.
 */
const GIVE_UP_MAX_MS = 60_000;

/**
 * The token a keyed mutation records in its own write (a session's id, the session's applied tokens: src/store/
 * lua/includes/recent.lua), so that a retry whose reservation succeeds after the first request's process died
 * between its commit and its answer's record finds the mutation done instead of doing it again. Derived from the
 * record's key (tenant and the scoped key's hash) and the request's fingerprint, so the same request on any replica
 * derives the same token, and the same key with another body (which the record, while kept, answers 422) never
 * takes the first request's change for its own. 24 hex digits (96 bits), never the length of a random id
 * (`newSessionId`: 16).
 */
export const appliedToken = (recordKey: string, fingerprint: string): string =>
  createHash('sha256').update(`${recordKey}\n${fingerprint}`).digest('hex').slice(0, 24);

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
    /** IN_FLIGHT_TTL_MS, shorter in tests of what outlives it: a pending record's lease, in ms. */
    private readonly inFlightTtlMs: number = IN_FLIGHT_TTL_MS,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'sess');
  }

  /** The record's key: the tenant and a hash of the client's key (never the key itself). */
  key(tenant: string, keyHash: string): string {
    return idempotencyKey(tenant, keyHash);
  }

  /**
   * Records this process gave up (`giveUp`) and could not drop yet, by key: their owners (every request of the key
   * given up here meanwhile: a retry answered 503 while Redis was away may or may not have written one, and must not
   * hide the one that did). A retry of one of them on this replica takes the record over at once (`reserve`) while
   * the entry is here; the entry goes when the drops land or will not, or once pruned after `until` (ms since the
   * epoch: see `giveUp`, which slides it).
   */
  private readonly givenUp = new Map<string, { owners: Set<string>; until: number }>();

  /**
   * Writes the `pending` record only if the key holds none (atomic: SET NX PX), for IN_FLIGHT_TTL_MS, or if it holds
   * a pending record this process gave up and could not drop yet (a 5xx while Redis paused: the client's retry
   * must not wait out the lease). True when this call wrote it.
   */
  async reserve(key: string, record: IdempotencyRecord): Promise<boolean> {
    const json = JSON.stringify(record);
    // Read before the SET: the entry goes while the SET is out if the give-up's background drop lands meanwhile
    // (`giveUp`), which leaves the key free.
    const left = this.givenUp.get(key);
    if ((await this.redis.set(key, json, 'PX', this.inFlightTtlMs, 'NX')) === 'OK') return true;
    // Whatever its `until`: a record this process gave up is safe to take over at any time (see `giveUp`), and a
    // process starved past `until` (its drop not tried yet since Redis answered) must not answer the retry 409.
    if (!left) return false;
    for (const owner of left.owners) {
      if ((await this.redis.sessIdemRelease(key, owner, json, this.inFlightTtlMs)) !== 1) continue;
      this.givenUp.delete(key);
      return true;
    }
    // The drop may have landed between the SET above and the takeover, which then found no record: the key is free,
    // as SET NX finds it.
    return (await this.redis.set(key, json, 'PX', this.inFlightTtlMs, 'NX')) === 'OK';
  }

  /**
   * The request that owns the pending record of `key` ends without an answer to keep (a 5xx), or does not know
   * whether its reservation landed (it failed as Redis stopped answering, and a paused Redis runs it later): the
   * record is deleted if it is still `owner`'s (idem-release-1.lua), so the client's retry runs at once. Best
   * effort and in the background: while Redis does not answer, tried again every GIVE_UP_RETRY_MS. Safe to run
   * again: a keyed mutation records its token with its change, so a retry of one that did land (a write Redis ran
   * after its caller timed out) finds it done.
   *
   * How long: the entry's `until` starts a lease after the give-up, and each drop that fails because Redis does not
   * answer (StoreUnavailable) moves it to a lease after that failure, at most GIVE_UP_MAX_MS after the give-up, where
   * the drops stop (an answer of Redis stops them sooner). A fixed lease from the give-up is not enough: a paused
   * Redis (`CLIENT PAUSE … ALL`) expires nothing, and runs what it was sent during the pause (this request's
   * reservation or renewal, timed out here) when the pause ends, a whole lease from then. A pause, or a starved
   * process, that outlasted the lease left the record in place with nobody to drop it, and the retry answered 409
   * for another lease (seen in CI). Sliding
   * it changes no answer's correctness, only how long the entry and its timers live: taking over or dropping a record
   * this process gave up is safe at any time, since its owner's request ended here with a 5xx (or never learned its
   * reservation landed), and `owner` is random per request, so a record written since is never another's dropped.
   */
  giveUp(key: string, owner: string): void {
    const now = Date.now();
    /** The last moment this owner's drop is tried, whatever the slides. */
    const cap = now + GIVE_UP_MAX_MS;
    // Entries are in the order they were (last) given up. Their `until`s no longer rise in that order (a slide moves
    // one past those behind it), so pruning from the front stops at the first live entry and may leave lapsed ones
    // behind it; but an entry's `until` is at most GIVE_UP_MAX_MS after its own give-up, so by GIVE_UP_MAX_MS after
    // an entry's give-up every entry before it has lapsed too, and the next give-up prunes them all. A lapsed entry
    // outlives that bound only until the next give-up, and its own drops delete it sooner (`settle`). Pruning a few
    // each (an outage's burst of 5xx), not the whole map each.
    for (const [k, v] of this.givenUp) {
      if (v.until >= now) break;
      this.givenUp.delete(k);
    }
    const entry = this.givenUp.get(key);
    // Its owners so far stay: each is in it only while its own drop is still tried (`settle` takes it out).
    const owners = entry ? entry.owners : new Set<string>();
    owners.add(owner);
    this.givenUp.delete(key); // to the back: the order stays that of the give-ups
    this.givenUp.set(key, { owners, until: now + this.inFlightTtlMs });
    /** Done with this owner: its drop landed, or will not. */
    const settle = () => {
      const e = this.givenUp.get(key);
      if (!e?.owners.delete(owner) || e.owners.size > 0) return;
      this.givenUp.delete(key);
    };
    const attempt = () => {
      if (!this.givenUp.get(key)?.owners.has(owner)) return;
      this.redis.sessIdemRelease(key, owner, '', 0).then(settle, (err: unknown) => {
        const e = this.givenUp.get(key);
        // Given up again meanwhile (a new entry without this owner) or pruned: nothing left to do for this owner.
        if (!e?.owners.has(owner)) return;
        const at = Date.now();
        // Another error is Redis's answer (the drop will not land by trying again); past `cap`, the outage has
        // lasted too long to keep the entry.
        if (!(err instanceof StoreUnavailable) || at >= cap) {
          settle();
          return;
        }
        // Redis does not answer: whatever it was sent may still run when it does, a lease from then. Never moved
        // back (another owner of the key may have moved it further), nor past this owner's `cap`.
        e.until = Math.max(e.until, Math.min(at + this.inFlightTtlMs, cap));
        setTimeout(attempt, GIVE_UP_RETRY_MS).unref();
      });
    };
    attempt();
  }

  /**
   * The request of a `pending` record still runs: its lease starts again (PEXPIRE). Sent on the connection that later
   * writes the answer (`keep`), so it never shortens the kept answer's TTL.
   */
  async renew(key: string): Promise<void> {
    await this.redis.pexpire(key, this.inFlightTtlMs);
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
}
