import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { untilKeyspace } from './keyspace-wait.js';
import { RUNS_KEY, sessionKeys } from '../../src/store/keys.js';

/**
 * A snapshot of every key of a (private, test-only) Redis but the replicas' liveness (CLOCKWORK): key →
 * `type:ttl-flag:value` (`unordered`: a hash's fields and a set's members sorted, else the DUMP in hex). Two snapshots
 * are equal iff no key was added, removed or changed (DUMP serialises the whole value, streams included).
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

/**
 * How long a snapshot waits for the runs under way to end (ms) before it fails: a stale due entry is dropped by the
 * runs' sweep (every second) once due, LEASE_TTL_MS (3 s in tests) after the heartbeat that wrote it.
 */
const RUNS_SETTLE_MS = 10_000;

/** A run's lease (keys.ts `lease`): `s:{<id>}:l`. */
const LEASES = 's:{*}:l';

/** A service's engine as a snapshot waits for it: how many runs it drives (src/engine/engine.ts `activeRuns`). */
export interface RunsOf {
  readonly activeRuns: number;
}

/**
 * Resolves once the engines `engines` drive no run (read every 10 ms: nothing tells a run's end outside its process)
 * and no run holds a lease (read again after each keyspace notification of a lease key: untilKeyspace); fails after
 * RUNS_SETTLE_MS naming what is left. The lease alone does not tell a run over: the commit that shows its session
 * `requires_action` or `idle` releases it (apply's `release_lease`), and the run's end writes after that commit (its
 * due entry and its tenant's run slot dropped, its sub-agent tree member woken: src/store/runs.ts `drop`; its spend
 * mark: release-2.lua). A run's drive returns once they are written. With a service running (`engines`), also once
 * `runs:due` holds no entry of a session that is not running: a heartbeat sent before the run's last commit and
 * answered after it writes a due entry that the run's end leaves (src/store/runs.ts `HeldRun.due`), which the runs'
 * sweep then drops — a change between two snapshots.
 */
async function runsOver(url: string, r: Redis, engines: readonly RunsOf[]): Promise<void> {
  try {
    const deadline = Date.now() + RUNS_SETTLE_MS;
    for (let n = 0; (n = engines.reduce((sum, e) => sum + e.activeRuns, 0)) > 0;) {
      if (Date.now() > deadline) throw new Error(`${n} runs still under way after ${RUNS_SETTLE_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
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
    if (engines.length > 0)
      await untilKeyspace(
        url,
        r,
        RUNS_KEY,
        async () => {
          const stale: string[] = [];
          for (const id of await r.zrange(RUNS_KEY, 0, -1))
            if ((await r.hget(sessionKeys(id).meta, 'status')) !== 'running') stale.push(id);
          return stale.length === 0 ? null : `due entries of sessions not running: ${stale.join(', ')}`;
        },
        RUNS_SETTLE_MS,
      );
  } catch (err) {
    throw new Error(`snapshotRedis: ${(err as Error).message}`, { cause: err });
  }
}

/** Resolves once the runs under way are over (runsOver: give the engines of the services in this process). */
export async function untilRunsOver(url: string, ...engines: RunsOf[]): Promise<void> {
  const r = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
  r.on('error', () => {});
  try {
    await r.connect();
    await runsOver(url, r, engines);
  } finally {
    r.disconnect();
  }
}

/**
 * A snapshot of every key, once the runs under way are over (runsOver: give the engines of the services in this
 * process, `app.engine`). A session is seen `requires_action` or `idle` as soon as its run's last commit lands; the
 * run's last writes come after, so a snapshot taken at once could see them land before the next one.
 */
export async function snapshotRedis(url: string, ...engines: RunsOf[]): Promise<RedisSnapshot> {
  const r = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
  r.on('error', () => {});
  try {
    await r.connect();
    await runsOver(url, r, engines);
    const keys = await scanAll(r);
    keys.sort();
    const out: RedisSnapshot = new Map();
    for (const key of keys) {
      if (CLOCKWORK.test(key)) continue;
      const [type, dump, pttl] = await Promise.all([r.type(key), r.dumpBuffer(key), r.pttl(key)]);
      if (dump === null) continue; // expired between SCAN and DUMP
      out.set(key, `${type}:${pttl >= 0 ? 'ttl' : 'no-ttl'}:${await unordered(r, key, type, dump)}`);
    }
    return out;
  } finally {
    r.disconnect();
  }
}

/**
 * A key's value as a snapshot holds it: a hash's fields (and a set's members) sorted, else the DUMP. A hash of many or
 * long fields (a session's meta) is a hash table, which DUMP writes in its iteration order, and a table being resized
 * is rehashed a step at each lookup of a field, reads included (an HGET of a refused request, a snapshot's wait): the
 * order may change between two snapshots of the same fields.
 */
async function unordered(r: Redis, key: string, type: string, dump: Buffer): Promise<string> {
  if (type === 'hash') {
    const fields = Object.entries(await r.hgetallBuffer(key)).map(([f, v]) => `${f}=${v.toString('hex')}`);
    return fields.sort().join(',');
  }
  if (type === 'set')
    return (await r.smembersBuffer(key))
      .map((m) => m.toString('hex'))
      .sort()
      .join(',');
  return dump.toString('hex');
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
