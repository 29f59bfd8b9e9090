import { createHash, randomBytes } from 'node:crypto';
import { sessionKeys } from '../store/keys.js';
import { fanoutState } from '../webhooks/keys.js';

/**
 * A schedule's keys use the session key layout under its own id (hash tag `{sch_…}`): the hash `s:{sch_…}`
 * (fields below, with `tenant` and `ev_bytes` as a session has them) and the event log `s:{sch_…}:e`, so its
 * events are paged, trimmed and fanned out to webhooks by the same code as a session's (the webhooks' fan-out
 * reads a log's tenant from that hash, and once it is deleted from its fan-out state, where the delete writes it).
 * `s:{sch_…}:runs` lists the sessions its fires created. The tenant index
 * and the due set are global keys, written in their own commands.
 */
export const scheduleKeys = (id: string) => {
  const k = sessionKeys(id);
  return { meta: k.meta, events: k.events, runs: `${k.meta}:runs`, fanout: fanoutState(id) };
};

/** ZSET of a tenant's schedules, members `<created_ms padded>:<id>` (score 0, paged by lex range). */
export const tenantSchedulesKey = (tenant: string) => `t:{${tenant}}:schedules`;

/**
 * HASH, the tenant's ledger of its schedules' bytes in its storage count (`t:{tenant}:bytes`, the same slot): schedule
 * id → the bytes the count holds for it, and `seq`, bumped by each write of the ledger (charges.ts).
 */
export const tenantScheduleBytesKey = (tenant: string) => `t:{${tenant}}:schedule_bytes`;

/**
 * ZSET of the writes of schedules' bytes under way (charges.ts): members `[id, tenant, token]` (JSON), scored by when
 * any replica's sweep settles the schedule's ledger entry should the write's own process not have (ms, the store's
 * clock).
 */
export const SCHEDULE_CHARGES_KEY = 'schedules:charges';

/** ZSET of schedules, scored by when any replica should look at them next (a fire, or a pending fire's lease). */
export const SCHEDULES_DUE_KEY = 'schedules:due';

/**
 * Hash of the schedulers' liveness (`since`, `last`: ms): every replica beats into it every second; a beat later
 * than the gap after the last one starts a new `since` (alive-1.lua).
 */
export const SCHEDULES_ALIVE_KEY = 'schedules:alive';

export const newScheduleId = () =>
  `sch_${randomBytes(12).toString('base64url').replace(/[-_]/g, '').slice(0, 16)}`;

/**
 * The id of the session a fire creates: the same for every attempt of that fire on any replica, so the create is
 * idempotent (a second one fails with `session_exists` and writes nothing).
 */
export const fireSessionId = (scheduleId: string, fireMs: number) =>
  `ses_${createHash('sha256').update(`${scheduleId}:${fireMs}`).digest('hex').slice(0, 24)}`;

type Overlap = 'skip' | 'allow';

export interface ScheduleRecord {
  id: string;
  tenant: string;
  revision: number;
  cron: string | null;
  at: number | null;
  timezone: string;
  overlap: Overlap;
  paused: boolean;
  /** The create body given for the sessions (JSON text, as given). */
  session: string;
  /**
   * Its bytes are in its tenant's ledger (charges.ts): every record written since the ledger is; one written before
   * was counted by its body's `.length` alone, adopted into the ledger at its next write.
   */
  charged?: boolean;
  nextRunAt: number | null;
  /**
   * Set when a PATCH retimed the schedule while `nextRunAt`, a fire of the old timing, was due and not yet claimed:
   * the new timing's first fire (null: none), which the claim of that fire moves `nextRunAt` to.
   */
  nextAfterDue?: number | null;
  /** The time of a fire claimed whose session is not created yet, and until when its claimer holds it. */
  pending: number | null;
  pendingUntil: number;
  lastFireAt: number | null;
  lastSession: string | null;
  fires: number;
  skips: number;
  createdAt: number;
  updatedAt: number;
}

const num = (v: string | undefined) => (v === undefined || v === '' ? null : Number(v));

export function decodeSchedule(id: string, h: Record<string, string>): ScheduleRecord | null {
  // A session's hash has the same layout (and `tenant`, `created_at`): only a schedule's id and hash are one.
  if (!id.startsWith('sch_') || h['id'] !== undefined || !h['tenant'] || !h['created_at']) return null;
  return {
    id,
    tenant: h['tenant'],
    revision: Number(h['revision'] ?? 1),
    cron: h['cron'] || null,
    at: num(h['at']),
    timezone: h['timezone'] || 'UTC',
    overlap: h['overlap'] === 'allow' ? 'allow' : 'skip',
    paused: h['paused'] === '1',
    session: h['session'] ?? '{}',
    charged: h['charged'] === '1',
    nextRunAt: num(h['next_run_at']),
    ...(h['next_after_due'] === undefined ? {} : { nextAfterDue: num(h['next_after_due']) }),
    pending: num(h['pending']),
    pendingUntil: Number(h['pending_until'] ?? 0),
    lastFireAt: num(h['last_fire_at']),
    lastSession: h['last_session'] || null,
    fires: Number(h['fires'] ?? 0),
    skips: Number(h['skips'] ?? 0),
    createdAt: Number(h['created_at']),
    updatedAt: Number(h['updated_at'] ?? h['created_at']),
  };
}

export function encodeSchedule(s: ScheduleRecord): Record<string, string> {
  const f: Record<string, string> = {
    tenant: s.tenant,
    revision: String(s.revision),
    cron: s.cron ?? '',
    at: s.at === null ? '' : String(s.at),
    timezone: s.timezone,
    overlap: s.overlap,
    paused: s.paused ? '1' : '0',
    session: s.session,
    charged: '1',
    created_at: String(s.createdAt),
    updated_at: String(s.updatedAt),
  };
  if (s.nextRunAt !== null) f['next_run_at'] = String(s.nextRunAt);
  return f;
}

/** When the sweep should look at the schedule next, or null when it never fires again. */
export function dueScore(s: ScheduleRecord): number | null {
  if (s.pending !== null) return s.pendingUntil;
  if (s.paused || s.nextRunAt === null) return null;
  return s.nextRunAt;
}
