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
 */
import { createHash, randomBytes } from 'node:crypto';
import { decodeStored } from './decode.js';
import { sessionKeys } from './keys.js';
import type { RedisClient } from './lua-commands.js';
import type { RedisClock } from '../redis/clock.js';

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

export type MintOutcome =
  | { ok: true; id: string; token: string; record: ClientTokenRecord }
  | { ok: false; reason: 'no_session' | 'too_many' };

export class ClientTokens {
  constructor(
    private readonly redis: RedisClient,
    /** Redis's clock as this process reckons it (the store's): tokens are minted and checked in it. */
    readonly clock: RedisClock,
  ) {}

  /** Stores a new token of `sessionId` (which must exist: one script checks it and writes). */
  async mint(
    tenant: string,
    sessionId: string,
    scopes: ClientScope[],
    ttlS: number,
    subject: string | null,
  ): Promise<MintOutcome> {
    const body = sessionId.slice('ses_'.length);
    const token = `ct_${body}_${randomBytes(32).toString('base64url')}`;
    const id = `ctk_${body}_${randomBytes(8).toString('hex')}`;
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
    const res = await this.redis.sessClientTokenMint(
      k.meta,
      k.tokens,
      sha256(token),
      id,
      JSON.stringify(record),
      record.expires_at + EXPIRED_KEPT_MS,
      now,
      MAX_TOKENS_PER_SESSION,
      EXPIRED_KEPT_MS,
    );
    if (res === 0) return { ok: false, reason: 'no_session' };
    if (res === -1) return { ok: false, reason: 'too_many' };
    return { ok: true, id, token, record };
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

  /** Removes a token by its id; false when the session holds none with this id. */
  async revoke(sessionId: string, id: string): Promise<boolean> {
    return (await this.redis.sessClientTokenRevoke(sessionKeys(sessionId).tokens, id)) === 1;
  }
}
