import { randomBytes } from 'node:crypto';
import { NotFound, QuotaExceeded, quotaExceeded, RevisionMismatch } from '../errors.js';
import type { RedisClient } from '../store/lua-commands.js';
import { storageKey } from '../store/storage-quota.js';
import type { SessionStore } from '../store/store.js';
import { isOutOfMemory } from '../store/unavailable.js';
import { SCHEDULE_CHARGES_KEY, scheduleKeys, tenantScheduleBytesKey, tenantSchedulesKey } from './keys.js';
import './lua/commands.js';

/**
 * How long a write's intent waits before a sweep settles it: a write settles its own within milliseconds, and a
 * sweep that settled one still in flight is harmless (the write settles again after it), but its intent would be gone.
 */
const CHARGE_GRACE_MS = 60_000;

/** Settles tried before one is left to the sweep: each refusal is another write of the tenant's ledger landing. */
const SETTLE_ATTEMPTS = 8;

/** Intents one sweep settles at most. */
const SWEEP_BATCH = 100;

/**
 * A schedule's create body counts in its tenant's storage (TENANT_MAX_BYTES): the tenant's count `t:{tenant}:bytes`
 * holds its bytes from the create to the delete. The record is in the schedule's slot and the count in the tenant's
 * (a Redis Cluster), so no one script writes both; a charge made in a step of its own before the record was written
 * stayed counted for good when its process was killed between the two (and so did a delete's bytes, given back
 * after its script).
 *
 * So the count holds a schedule's bytes through the tenant's ledger (`t:{tenant}:schedule_bytes`, keys.ts, in the
 * count's slot): schedule id → the bytes the count holds for it, written only with the count, in one script, and
 * `seq`, bumped by each of those writes. A write that changes what a schedule keeps (a create, a PATCH of its
 * `session`, a delete) goes:
 * 1. its intent into `schedules:charges`, due CHARGE_GRACE_MS on;
 * 2. a charge (charge-3.lua), before the record holds more: the entry raised to the new body's bytes, 429 past the
 *    limit (a create's index entry in the same script, 429 at SCHEDULES_MAX_PER_TENANT);
 * 3. the write of the record, in its own slot;
 * 4. a settle (settle-2.lua): the entry set to what the record keeps now, the count moved by the difference (what a
 *    smaller body or a delete gives back, a refused write's charge), guarded by `seq` as read before the record;
 * 5. the intent dropped.
 * A process killed anywhere in between leaves its intent, and any replica's sweep settles the schedule once it is
 * due (`settleDue`). A settle sets, it never adds, so one run twice or by two processes at once counts the same; and
 * one whose read of the record is older than another write of the ledger is refused and reads again, so an older
 * size never lands over a newer one. Every change of a record is followed by a settle that read it after (its own, or
 * the sweep's), so the last settle to land has read the record as it stays.
 *
 * Units: UTF-8 bytes of the body (`HSTRLEN`). A record written before the ledger (no `charged` field) was counted by
 * its body's `.length` alone: a write or a settle that finds no entry for it adopts that count as it is (counted
 * already), then settles it to bytes.
 */
export class ScheduleCharges {
  constructor(
    private readonly redis: RedisClient,
    private readonly sessions: SessionStore,
  ) {}

  /**
   * Runs `write` (which changes what schedule `id` keeps) after `charge` (null: none), with the intent before and
   * the settle after (above). A refused charge (429) wrote nothing: only the intent goes. A write refused (404, 412)
   * without a charge before it changed nothing either; else the schedule is settled, whatever the write's outcome. A
   * settle that fails is left to the sweep (the intent stays), and the write's answer stands.
   */
  async within<T>(
    tenant: string,
    id: string,
    charge: (() => Promise<void>) | null,
    write: () => Promise<T>,
  ): Promise<T> {
    const intent = await this.intend(tenant, id);
    try {
      await charge?.();
    } catch (err) {
      // Refused (429), nothing written; another failure may have landed: left to the sweep.
      if (intent && err instanceof QuotaExceeded)
        await this.redis.zrem(SCHEDULE_CHARGES_KEY, intent).catch(() => 0);
      throw err;
    }
    let refused = false;
    try {
      return await write();
    } catch (err) {
      refused = err instanceof NotFound || err instanceof RevisionMismatch;
      throw err;
    } finally {
      if (refused && !charge) {
        if (intent) await this.redis.zrem(SCHEDULE_CHARGES_KEY, intent).catch(() => 0);
      } else if ((await this.settle(tenant, id).catch(() => false)) && intent) {
        await this.redis.zrem(SCHEDULE_CHARGES_KEY, intent).catch(() => 0);
      }
    }
  }

  /**
   * Writes the intent of a write of schedule `id` (its member), or null on a full Redis (noeviction): a delete frees
   * memory and must run then too, and without an intent a kill between its steps leaves its bytes counted (too high,
   * an upper bound), as before the ledger.
   */
  private async intend(tenant: string, id: string): Promise<string | null> {
    const member = JSON.stringify([id, tenant, randomBytes(6).toString('base64url')]);
    try {
      await this.redis.zadd(SCHEDULE_CHARGES_KEY, this.sessions.clock.now() + CHARGE_GRACE_MS, member);
      return member;
    } catch (err) {
      if (!isOutOfMemory(err)) throw err;
      return null;
    }
  }

  /**
   * charge-3.lua: raises the tenant's ledger entry of schedule `id` to `bytes` (null: none, an adoption only) and the
   * count with it: 429 `quota_exceeded` (`storage_bytes`) past TENANT_MAX_BYTES; with `listing`, the create's index
   * entry too: 429 (`SCHEDULES_MAX_PER_TENANT`) when the tenant has `max` schedules. `legacy`: the bytes counted for a
   * record written before the ledger, its entry when it has none.
   */
  async charge(
    tenant: string,
    id: string,
    bytes: number | null,
    opts: { legacy?: number | null; listing?: { member: string; max: number } } = {},
  ): Promise<void> {
    const ceiling = await this.sessions.storage.ceiling(tenant);
    const r = await this.redis.schedCharge(
      storageKey(tenant),
      tenantScheduleBytesKey(tenant),
      tenantSchedulesKey(tenant),
      id,
      bytes === null ? '' : String(bytes),
      ceiling === null ? '' : String(ceiling),
      opts.legacy == null ? '' : String(opts.legacy),
      opts.listing?.member ?? '',
      opts.listing?.max ?? 0,
    );
    if (r === 0) throw quotaExceeded('SCHEDULES_MAX_PER_TENANT', opts.listing?.max ?? 0, 'schedules');
    if (r === -1) throw this.sessions.storage.refusal();
  }

  /**
   * settle-2.lua: sets the tenant's ledger entry of schedule `id` to the bytes its record keeps now (no record of the
   * tenant: none), the count with it. The ledger's `seq` is read first, then the record (one MULTI: its tenant, its
   * marker and its body's bytes, of one moment). True once settled; false after SETTLE_ATTEMPTS refusals.
   */
  async settle(tenant: string, id: string): Promise<boolean> {
    const ledger = tenantScheduleBytesKey(tenant);
    const meta = scheduleKeys(id).meta;
    for (let attempt = 0; attempt < SETTLE_ATTEMPTS; attempt++) {
      const seq = await this.redis.hget(ledger, 'seq');
      const res =
        (await this.redis.multi().hmget(meta, 'tenant', 'charged').hstrlen(meta, 'session').exec()) ?? [];
      for (const [e] of res) if (e) throw e;
      const [owner, charged] = (res[0]?.[1] ?? []) as Array<string | null>;
      let keeps = '';
      let legacy = '';
      if (owner === tenant) {
        keeps = String(res[1]?.[1] ?? 0);
        // Written before the ledger: counted by its body's `.length` (read again should it change meanwhile: the
        // adoption happens only where the entry is missing, which a write of the body after the ledger never leaves).
        if (charged !== '1') legacy = String((await this.redis.hget(meta, 'session'))?.length ?? 0);
      }
      const done = await this.redis.schedSettle(storageKey(tenant), ledger, id, seq ?? '', keeps, legacy);
      if (done === 1) return true;
    }
    return false;
  }

  /**
   * The sweep: settles the schedules of the intents due by `now` (the store's clock), SWEEP_BATCH at most, dropping
   * each intent once its schedule is settled. Any replica may run it at any time: a settle is idempotent.
   */
  async settleDue(now: number): Promise<void> {
    const members = await this.redis.zrangebyscore(
      SCHEDULE_CHARGES_KEY,
      '-inf',
      now,
      'LIMIT',
      0,
      SWEEP_BATCH,
    );
    for (const member of members) {
      const intent = parseIntent(member);
      if (!intent || (await this.settle(intent.tenant, intent.id)))
        await this.redis.zrem(SCHEDULE_CHARGES_KEY, member);
    }
  }
}

/** An intent's schedule id and tenant, or null for a member this version did not write. */
function parseIntent(member: string): { id: string; tenant: string } | null {
  try {
    const v: unknown = JSON.parse(member);
    if (Array.isArray(v) && typeof v[0] === 'string' && typeof v[1] === 'string')
      return { id: v[0], tenant: v[1] };
  } catch {
    /* not JSON */
  }
  return null;
}
