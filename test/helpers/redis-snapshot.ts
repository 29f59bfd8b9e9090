import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { untilKeyspace } from './keyspace-wait.js';

/**
 * A snapshot of every key of a (private, test-only) Redis but the replicas' liveness (CLOCKWORK): key →
 * `type:ttl-flag:DUMP hex`. Two snapshots are equal iff no key was added, removed or changed (DUMP serialises the
 * whole value, streams included).
 */
export type RedisSnapshot = Map<string, string>;

/**
 * Keys written whatever the requests do, left out of every snapshot: the replicas' liveness (`q:replicas:<name>`,
 * src/quotas/slots.ts; the schedulers' `schedules:alive`; both written every second) and the byte budgets
 * (`rl:…:bytes`), which count every body read, refused or not. The request windows (`rl:{tenant}`, a token's, a
 * route's own) stay in: they count admitted requests only, so a refused request that wrote one changes the snapshot.
 */
const CLOCKWORK = /^(q:replicas:|schedules:alive$)|^rl:.*:bytes$/;

/** Every key of `r` matching `pattern` (all: `*`). */
async function scanAll(r: Redis, pattern = '*'): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await r.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  return keys;
}

/** How long a snapshot waits for the runs under way to let go of their leases (ms) before it fails. */
const RUNS_SETTLE_MS = 5000;

/** A run's lease (keys.ts `lease`): `s:{<id>}:l`. */
const LEASES = 's:{*}:l';

/**
 * Resolves once no run holds a lease, read again after each keyspace notification of a lease key (untilKeyspace);
 * fails after RUNS_SETTLE_MS naming the leases still held.
 */
async function leasesReleased(url: string, r: Redis): Promise<void> {
  try {
    await untilKeyspace(
      url,
      r,
      LEASES,
      async () => {
        const held = await scanAll(r, LEASES);
        return held.length === 0 ? null : `leases held: ${held.join(', ')}`;
      },
      RUNS_SETTLE_MS,
    );
  } catch (err) {
    throw new Error(`snapshotRedis: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * A snapshot of every key, once no run holds a lease (`s:{id}:l`; leasesReleased). A session is seen
 * `requires_action` or `idle` as soon as its run's last commit lands; the run's last writes come after (its tenant's
 * run slot dropped, then its lease released with its spend mark, release-2.lua), so a snapshot taken at once could
 * see them land before the next one. The lease goes last: none left, the runs wrote all.
 */
export async function snapshotRedis(url: string): Promise<RedisSnapshot> {
  const r = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
  r.on('error', () => {});
  try {
    await r.connect();
    await leasesReleased(url, r);
    const keys = await scanAll(r);
    keys.sort();
    const out: RedisSnapshot = new Map();
    for (const key of keys) {
      if (CLOCKWORK.test(key)) continue;
      const [type, dump, pttl] = await Promise.all([r.type(key), r.dumpBuffer(key), r.pttl(key)]);
      if (dump === null) continue; // expired between SCAN and DUMP
      out.set(key, `${type}:${pttl >= 0 ? 'ttl' : 'no-ttl'}:${dump.toString('hex')}`);
    }
    return out;
  } finally {
    r.disconnect();
  }
}

/** The keys that differ between two snapshots (added, removed, changed). */
export function snapshotDiff(before: RedisSnapshot, after: RedisSnapshot): string[] {
  const diff: string[] = [];
  for (const [k, v] of before) {
    if (!after.has(k)) diff.push(`removed ${k}`);
    else if (after.get(k) !== v) diff.push(`changed ${k}`);
  }
  for (const k of after.keys()) if (!before.has(k)) diff.push(`added ${k}`);
  return diff;
}

/** `ignore`: keys whose change is expected (e.g. the `idem:` answers stored for a client's Idempotency-Keys). */
export function assertSnapshotsEqual(
  before: RedisSnapshot,
  after: RedisSnapshot,
  what: string,
  ignore?: RegExp,
): void {
  const diff = snapshotDiff(before, after).filter((d) => !ignore?.test(d.slice(d.indexOf(' ') + 1)));
  assert.deepEqual(diff, [], `${what}: Redis changed: ${diff.join(', ')}`);
}
