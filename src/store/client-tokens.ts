/**
 * Client tokens (spec §7.2): short-lived bearer tokens a tenant mints for a browser, scoped to one session. Each is a
 * record in Redis, looked up on every request (so a revocation holds at once on every replica), in the session's
 * own hash `s:{<id>}:ct` (the session's hash tag: the destroy script deletes it with the session). The token itself
 * is never stored: the record is found by its SHA-256. The token and its id both carry the session id, so a request
 * names the key to read without any index.
 *
 * `expires_at` (and `created_at`) are of Redis's clock as the store reckons it (`clock`, src/redis/clock.ts), and so
 * is the check of every request (src/plugins/auth.ts): with the replicas' clocks, one behind minted tokens already
 * past (or short) for the others and accepted expired ones, one ahead refused live ones (401 `token_expired`). No key
 * expiry bounds a token: the hash outlives its last record's `expires_at` by EXPIRED_KEPT_MS (so an expired token is
 * told so), and that expiry (PEXPIREAT) is of Redis's clock too.
 *
 * Storage: a token's record and its events (`client_token.created`, `client_token.revoked`) count in the tenant's
 * TENANT_MAX_BYTES as the session's own writes do, in the session's `bytes` (so the session's delete gives them back):
 * a mint is refused with 429 `quota_exceeded` (`storage_bytes`) while they would take the tenant past its limit; a
 * revoke never is (it frees a credential). A record's bytes are given back when it goes: revoked, dropped by a later
 * mint once expired, or, for records that expired with the whole hash, at the session's next mint (the count is an
 * upper bound until then; a mint refused for storage releases them first and asks again; the session's delete gives everything back). See client-token-mint-2.lua.
 */
import { createHash, randomBytes } from 'node:crypto';
import { QuotaExceeded } from '../errors.js';
import { decodeStored } from './decode.js';
import { sessionKeys } from './keys.js';
import type { RedisClient } from './lua-commands.js';
import type { RedisClock } from '../redis/clock.js';
import type { StorageQuota } from './storage-quota.js';

export const CLIENT_SCOPES = ['read', 'message', 'decide', 'results', 'cancel'] as const;
export type ClientScope = (typeof CLIENT_SCOPES)[number];

/** What the store keeps of a token (never the token). */
export interface ClientTokenRecord {
  id: string;
  tenant: string;
  session_id: string;
  scopes: ClientScope[];
  subject: string | null;
  /** ms since the epoch. */
  expires_at: number;
  created_at: number;
}

/** Most tokens one session holds (expired ones still answered `token_expired` count too). */
export const MAX_TOKENS_PER_SESSION = 100;
/**
 * How long a record outlives its expiry, so that an expired token is told `token_expired` rather than
 * `unauthorized`; after that it is gone (and refused as unknown).
 */
export const EXPIRED_KEPT_MS = 3_600_000;

/**
 * The `by` values the service writes itself on what it does (spec §7.4: a deadline's denial of a call is
 * `tool_call.decided` with `"by": "timeout"`; a tenant key writes no `by`). A token's subject is recorded as `by`
 * too, so no subject may be one of these (`reservedSubject`): `by` alone tells a deadline from a person. A writer of
 * a new one names it here.
 */
export const SERVICE_ACTORS = { deadline: 'timeout' } as const;

/** What every token id starts with: the `by` of a token minted without a subject is its id (auth.ts `actorOf`). */
const TOKEN_ID_PREFIX = 'ctk_';

/**
 * Why `subject` may not be a token's subject, or null when it may: a `by` the service writes (SERVICE_ACTORS), or
 * one that reads as a token id (`ctk_…`, another token's or any), which a token without a subject is recorded by.
 * Exact: `Timeout` or `timeout-bot` is someone's, as a reader comparing `by` sees.
 */
export function reservedSubject(subject: string): string | null {
  if (Object.values<string>(SERVICE_ACTORS).includes(subject))
    return `reserved: the service records "${subject}" as \`by\` itself`;
  if (subject.startsWith(TOKEN_ID_PREFIX))
    return `reserved: \`${TOKEN_ID_PREFIX}…\` is a token id, the \`by\` of a token minted without a subject`;
  return null;
}

const TOKEN = /^ct_([A-Za-z0-9]{10,40})_([A-Za-z0-9_-]{43})$/;
const TOKEN_ID = /^ctk_([A-Za-z0-9]{10,40})_([0-9a-f]{16})$/;

/** Whether a bearer has the shape of a client token (then it is never compared with the tenant keys). */
export const isClientToken = (bearer: string): boolean => TOKEN.test(bearer);

/** The session id a client token id names, or null for a malformed id. */
export function sessionOfTokenId(id: string): string | null {
  const m = TOKEN_ID.exec(id);
  return m ? `ses_${m[1]}` : null;
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** Bytes an event keeps in the session's log (its type and data). */
const eventSize = ([type, data]: [string, string]) => Buffer.byteLength(type) + Buffer.byteLength(data);

export type MintOutcome =
  | {
      ok: true;
      id: string;
      token: string;
      record: ClientTokenRecord;
      /** The `client_token.created` event, counted in the session's bytes: the caller appends it. */
      event: [string, string];
    }
  | { ok: false; reason: 'no_session' | 'too_many' };

export class ClientTokens {
  constructor(
    private readonly redis: RedisClient,
    /** Redis's clock as this process reckons it (the store's): tokens are minted and checked in it. */
    readonly clock: RedisClock,
    /** The tenants' storage counts (the session store's): tokens count in TENANT_MAX_BYTES. */
    private readonly storage: StorageQuota,
  ) {}

  /**
   * Stores a new token of `sessionId` (which must exist: one script checks it and writes), whose `client_token.created`
   * event `created` makes. 429 `quota_exceeded` (`storage_bytes`) when the record and the event would take `tenant`
   * past TENANT_MAX_BYTES.
   */
  async mint(
    tenant: string,
    sessionId: string,
    scopes: ClientScope[],
    ttlS: number,
    subject: string | null,
    created: (record: ClientTokenRecord) => [string, string],
  ): Promise<MintOutcome> {
    const body = sessionId.slice('ses_'.length);
    const token = `ct_${body}_${randomBytes(32).toString('base64url')}`;
    const id = `${TOKEN_ID_PREFIX}${body}_${randomBytes(8).toString('hex')}`;
    const now = this.clock.now();
    const record: ClientTokenRecord = {
      id,
      tenant,
      session_id: sessionId,
      scopes: [...new Set(scopes)],
      subject,
      expires_at: now + ttlS * 1000,
      created_at: now,
    };
    const k = sessionKeys(sessionId);
    const hash = sha256(token);
    const json = JSON.stringify(record);
    const event = created(record);
    const eventBytes = eventSize(event);
    const run = (most: number) =>
      this.redis.sessClientTokenMint(
        k.meta,
        k.tokens,
        hash,
        id,
        json,
        record.expires_at + EXPIRED_KEPT_MS,
        now,
        most,
        EXPIRED_KEPT_MS,
        eventBytes,
      );
    // The script's count of the record: its two fields (`h:<hash>` → record, `i:<id>` → hash).
    const need = 2 + hash.length + Buffer.byteLength(json) + 2 + id.length + hash.length + eventBytes;
    await this.storage.room(tenant, need).catch(async (err: unknown) => {
      // Refused: the count may still hold records gone since (expired, or the whole hash with them), given back
      // only by a mint of the session's, which the refusal stops. Release them (the script with room for no token:
      // it drops and gives back, stores nothing), then ask again. Only a refused mint pays for this.
      if (!(err instanceof QuotaExceeded)) throw err;
      const [, freed] = await run(0);
      if (freed >= 0) throw err;
      await this.storage.add(tenant, freed);
      await this.storage.room(tenant, need);
    });
    const [code, added] = await run(MAX_TOKENS_PER_SESSION);
    // (Refused for too many tokens, the script may still have given back the bytes of expired ones it dropped.)
    await this.storage.add(tenant, added);
    if (code === 0) return { ok: false, reason: 'no_session' };
    if (code === -1) return { ok: false, reason: 'too_many' };
    return { ok: true, id, token, record, event };
  }

  /** The record of a token (expired or not), or null for an unknown or revoked one. One HGET. */
  async lookup(token: string): Promise<ClientTokenRecord | null> {
    const m = TOKEN.exec(token);
    if (!m) return null;
    const raw = await this.redis.hget(sessionKeys(`ses_${m[1]}`).tokens, `h:${sha256(token)}`);
    return raw ? decodeStored<ClientTokenRecord>(raw) : null;
  }

  /** Whether the token of `rec` is still stored (not revoked, its session not deleted). One HEXISTS. */
  async isLive(rec: ClientTokenRecord): Promise<boolean> {
    return (await this.redis.hexists(sessionKeys(rec.session_id).tokens, `i:${rec.id}`)) === 1;
  }

  /**
   * Removes a token of `tenant`'s session by its id, giving its record's bytes back and counting `event` (its
   * `client_token.revoked`, which the caller appends); never refused for storage. False when the session holds no
   * token with this id. Once the script has run the token is revoked, whatever becomes of the tenant's counter: a
   * counter not written (Redis full refuses the INCRBY, which the script's HDEL never is) is told to `countLost` and
   * does not fail the revoke; the count then stays higher than what is stored (an upper bound, as the design allows).
   */
  async revoke(
    tenant: string,
    sessionId: string,
    id: string,
    event: [string, string],
    countLost: (err: unknown) => void = () => {},
  ): Promise<boolean> {
    const k = sessionKeys(sessionId);
    const [code, added] = await this.redis.sessClientTokenRevoke(k.meta, k.tokens, id, eventSize(event));
    await this.storage.add(tenant, added).catch(countLost);
    return code === 1;
  }
}
