import { z } from 'zod';
import { intQuery } from '../int-param.js';
import { ID_LIKE, createSessionBody } from '../schemas.js';
import type { ScheduleRecord } from './keys.js';

/** Spec §7.6: the bodies and the resource of /v1/schedules. */

export const scheduleIdParam = z.strictObject({
  id: z.string().regex(ID_LIKE, 'not a schedule id: 1-128 of [A-Za-z0-9_-]'),
});

const CRON_FIELDS =
  'a 5-field cron expression (minute hour day-of-month month day-of-week); nicknames such as @daily are not taken';
const cron = z
  .string()
  .min(9, CRON_FIELDS)
  .max(120, CRON_FIELDS)
  .meta({
    description: 'A 5-field cron expression (minute hour day-of-month month day-of-week), in `timezone`.',
    examples: ['0 9 * * 1-5'],
  });
const at = z.iso.datetime({ offset: true }).meta({ description: 'One fire at this time (ISO 8601).' });
const timezone = z
  .string()
  .min(1)
  .max(64)
  .meta({ description: 'IANA time zone.', examples: ['Europe/Paris'] });
const overlap = z.enum(['skip', 'allow']).meta({
  description:
    '`skip`: no session is created while the last one still runs (`running` or `requires_action`); `allow`: always.',
});
/** A create body (POST /v1/sessions) whose metadata leaves room for `schedule_id` and `scheduled_for`. */
const sessionBody = createSessionBody.refine((b) => Object.keys(b.metadata).length <= 30, {
  message: 'at most 30 metadata keys (schedule_id and scheduled_for are added)',
  path: ['metadata'],
});

export const createScheduleBody = z
  .strictObject({
    cron: cron.optional(),
    at: at.optional(),
    timezone: timezone.default('UTC'),
    session: sessionBody,
    overlap: overlap.default('skip'),
    paused: z.boolean().default(false),
  })
  .refine((b) => (b.cron === undefined) !== (b.at === undefined), {
    message: 'give `cron` or `at`, one of them',
    path: ['cron'],
  });

export const patchScheduleBody = z
  .strictObject({
    cron: cron.optional(),
    at: at.optional(),
    timezone: timezone.optional(),
    session: sessionBody.optional(),
    overlap: overlap.optional(),
    paused: z.boolean().optional(),
  })
  .refine((b) => b.cron === undefined || b.at === undefined, {
    message: 'give `cron` or `at`, not both',
    path: ['cron'],
  });
export type PatchScheduleBody = z.infer<typeof patchScheduleBody>;

export const pageQuery = z.strictObject({
  limit: intQuery(1, 100, 20),
  cursor: z.string().max(200).optional(),
});

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export const schedule = z
  .object({
    id: z.string(),
    object: z.literal('schedule'),
    cron: z.string().nullable(),
    at: z.string().nullable(),
    timezone: z.string(),
    overlap: z.enum(['skip', 'allow']),
    paused: z.boolean(),
    session: z.record(z.string(), z.unknown()),
    next_run_at: z.string().nullable().meta({ description: 'The next fire; null when paused or done.' }),
    last_fire_at: z.string().nullable(),
    last_session_id: z.string().nullable(),
    fires: z.number().int().meta({ description: 'Fires that created a session.' }),
    skips: z.number().int().meta({ description: 'Fires skipped (overlap, a quota, a refused body).' }),
    revision: z.number().int(),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'Schedule' });

export const scheduleList = z
  .object({ data: z.array(schedule), next_cursor: z.string().nullable(), has_more: z.boolean() })
  .meta({ id: 'ScheduleList' });

export const deletedSchedule = z
  .object({ id: z.string(), object: z.literal('schedule'), deleted: z.literal(true) })
  .meta({ id: 'DeletedSchedule' });

export function scheduleView(s: ScheduleRecord): z.infer<typeof schedule> {
  return {
    id: s.id,
    object: 'schedule',
    cron: s.cron,
    at: iso(s.at),
    timezone: s.timezone,
    overlap: s.overlap,
    paused: s.paused,
    session: JSON.parse(s.session) as Record<string, unknown>,
    next_run_at: s.paused ? null : iso(s.nextRunAt),
    last_fire_at: iso(s.lastFireAt),
    last_session_id: s.lastSession,
    fires: s.fires,
    skips: s.skips,
    revision: s.revision,
    created_at: new Date(s.createdAt).toISOString(),
    updated_at: new Date(s.updatedAt).toISOString(),
  };
}
