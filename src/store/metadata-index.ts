/**
 * The metadata index of `GET /v1/sessions?metadata.<key>=<value>` (issue 26): per tenant and per scalar metadata
 * pair, a ZSET of the tenant index's members (`<created ms padded>:<id>`, score 0), so a filtered list pages one
 * small set newest first instead of scanning every session. Kept by the writes of metadata (create and fork before
 * the session is written, PATCH and delete after), each a few commands; a reader checks every candidate against the
 * session itself and drops stale members, so the index may hold more than is true, never answer what is not. A
 * delete's entries are named in a mark before its script (session-index.ts UNINDEX_KEY), so that those of a process
 * killed right after it are dropped by another replica's sweep.
 */
import { createHash } from 'node:crypto';
import type { RedisClient } from './lua-commands.js';

/** Most `metadata.<key>` filters one list request takes. */
export const MAX_METADATA_FILTERS = 3;
/** Longest key and value (characters) that are indexed and that a filter may name: the metadata schema's limits. */
export const MAX_METADATA_KEY = 64;
export const MAX_METADATA_VALUE = 512;

export type MetadataPair = [key: string, value: string];

/** The value of a metadata entry as a filter compares it: a string, number or boolean as text; else none. */
function indexedValue(v: unknown): string | null {
  if (typeof v === 'string') return v.length <= MAX_METADATA_VALUE ? v : null;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return null;
}

/** The pairs of `metadata` that are indexed. */
export function metadataPairs(metadata: Record<string, unknown>): MetadataPair[] {
  const out: MetadataPair[] = [];
  for (const [k, v] of Object.entries(metadata)) {
    const value = indexedValue(v);
    if (k.length <= MAX_METADATA_KEY && value !== null) out.push([k, value]);
  }
  return out;
}

/** Whether `metadata` holds every pair of `filters`. */
export const matchesMetadata = (metadata: Record<string, unknown>, filters: readonly MetadataPair[]) =>
  filters.every(([k, v]) => Object.hasOwn(metadata, k) && indexedValue(metadata[k]) === v);

/** A pair's hash: the last part of its index key's name, of bounded length (32 hex digits). */
export const pairHash = ([k, v]: MetadataPair): string =>
  createHash('sha256')
    .update(JSON.stringify([k, v]))
    .digest('hex')
    .slice(0, 32);

/** The index key of the pair whose hash (`pairHash`) is `hash`. */
export const metadataHashKey = (tenant: string, hash: string) => `t:{${tenant}}:md:${hash}`;

/** ZSET of one pair's sessions (hash tag: the tenant, as its session index). The pair is hashed: bounded length. */
export const metadataIndexKey = (tenant: string, pair: MetadataPair) =>
  metadataHashKey(tenant, pairHash(pair));

export class MetadataIndex {
  constructor(private readonly redis: RedisClient) {}

  async add(tenant: string, member: string, pairs: readonly MetadataPair[]): Promise<void> {
    await Promise.all(pairs.map((p) => this.redis.zadd(metadataIndexKey(tenant, p), 0, member)));
  }

  async remove(tenant: string, member: string, pairs: readonly MetadataPair[]): Promise<void> {
    await Promise.all(pairs.map((p) => this.redis.zrem(metadataIndexKey(tenant, p), member)));
  }

  /**
   * After a write replaced `before` by `after`: drops the pairs that left, then adds those of `current()` (the
   * session as it is now, read after the removals), so concurrent writers converge on the pairs of the last write.
   */
  async replace(
    tenant: string,
    member: string,
    before: Record<string, unknown>,
    after: Record<string, unknown>,
    current: () => Promise<Record<string, unknown> | null>,
  ): Promise<void> {
    const kept = new Set(metadataPairs(after).map((p) => JSON.stringify(p)));
    await this.remove(
      tenant,
      member,
      metadataPairs(before).filter((p) => !kept.has(JSON.stringify(p))),
    );
    const now = await current();
    if (now) await this.add(tenant, member, metadataPairs(now));
  }

  /** The filter with the fewest sessions (one ZCARD each): the set a filtered list pages. */
  async narrowest(tenant: string, filters: readonly MetadataPair[]): Promise<MetadataPair> {
    const sizes = await Promise.all(filters.map((f) => this.redis.zcard(metadataIndexKey(tenant, f))));
    let best = 0;
    for (let i = 1; i < filters.length; i++) if (sizes[i]! < sizes[best]!) best = i;
    return filters[best]!;
  }
}
