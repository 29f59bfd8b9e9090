import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { checkCreate } from '../src/sessions/create.js';
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import { intQuery } from '../src/int-param.js';
import { badRequest, InvalidRequest, RevisionMismatch } from '../src/errors.js';
import { cursorParam, parseCursor } from '../src/events/cursor.js';
import { envelope } from '../src/events/envelope.js';
import { errors, eventPage, sessionList, routeErrors, type RouteCodes } from '../src/openapi/responses.js';
import { cronProblem, isIanaTimezone, nextFire, type Timing } from '../src/schedules/cron.js';
import { newScheduleId, type ScheduleRecord } from '../src/schedules/keys.js';
import { FireRaced } from '../src/schedules/store.js';
import {
  createScheduleBody,
  deletedSchedule,
  pageQuery,
  patchScheduleBody,
  type PatchScheduleBody,
  schedule,
  scheduleIdParam,
  scheduleList,
  scheduleView,
} from '../src/schedules/schemas.js';
import { sessionView } from '../src/sessions/view.js';
import { withText } from '../src/openapi/serializer.js';
import type { SessionState } from '../src/store/session-state.js';
import { ifMatchHeader, resolveIfMatch } from './mutations.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['schedule_not_found'] } as const satisfies RouteCodes;

/** Spec §7.6: a tenant's schedules. Another tenant's schedule is 404 `schedule_not_found`. */

/** An `at` this far in the past is refused (a clock a little behind is not). */
const AT_PAST_MS = 60_000;

const eventsQuery = z.strictObject({
  after: cursorParam.optional(),
  limit: intQuery(1, 500, 100),
});

/** The PATCH body without the fields whose values the schedule has already. */
function unchangedLeftOut(b: PatchScheduleBody, s: ScheduleRecord): PatchScheduleBody {
  const same: Record<keyof PatchScheduleBody, boolean> = {
    cron: b.cron === s.cron,
    at: b.at !== undefined && s.at !== null && Date.parse(b.at) === s.at,
    timezone: b.timezone === s.timezone,
    session: b.session !== undefined && JSON.stringify(b.session) === s.session,
    overlap: b.overlap === s.overlap,
    paused: b.paused === s.paused,
  };
  return Object.fromEntries(
    Object.entries(b).filter(([k]) => !same[k as keyof PatchScheduleBody]),
  ) as PatchScheduleBody;
}

/**
 * Bytes of the `session` bodies in one page of `GET /v1/schedules`, and of the session views in one page of a
 * schedule's runs (at least one a page): as GET /v1/sessions's pages (routes/sessions.ts).
 */
const LIST_PAGE_MAX_BYTES = 1_048_576;

function send(reply: FastifyReply, s: ScheduleRecord, code = 200) {
  return reply.code(code).header('etag', `"${s.revision}"`).send(scheduleView(s));
}

/**
 * Checks a schedule's times (400 `invalid_request` naming the field; the zone only when the request gives it, so a
 * schedule stored before a zone was refused still resumes and retimes) and answers its next fire from `now`: Redis's
 * clock (the store's `clock.now()`), which fires come by. From the answering replica's own, one behind resuming a
 * frequent cron made the fires it counted as missed due at once (a burst), one ahead gave an `at` still to come no
 * fire, and took one a minute away for past.
 */
function checkTiming(
  t: Timing,
  secondsCron: boolean,
  given: { at: boolean; timezone: boolean },
  now: number,
): number | null {
  if (given.timezone && !isIanaTimezone(t.timezone))
    throw badRequest('Unknown time zone.', [{ path: '/timezone', message: 'not an IANA time zone' }]);
  if (t.cron !== null) {
    const problem = cronProblem(t.cron, t.timezone, secondsCron);
    if (problem)
      throw badRequest(`Invalid cron expression: ${problem}.`, [{ path: '/cron', message: problem }]);
  }
  if (given.at && t.at !== null && t.at < now - AT_PAST_MS)
    throw badRequest('`at` is in the past.', [{ path: '/at', message: 'in the past' }]);
  return t.at !== null ? t.at : nextFire(t, now);
}

/**
 * Times a PATCH is computed again after a concurrent change, at most (then 412, as with If-Match): each round one
 * of the PATCHes racing lands, so this many racing at once all land.
 */
const CAS_ATTEMPTS = 32;

const routes: FastifyPluginAsyncZod = async (app) => {
  const tags = ['schedules'];
  const { store, maxPerTenant, secondsCron } = app.schedules;

  /** One PATCH of `s` as read: what changes, written at `s.revision` (or `ifMatch`). */
  async function patchOnce(
    s: ScheduleRecord,
    body: z.infer<typeof patchScheduleBody>,
    tenant: string,
    ifMatch: number | undefined,
  ): Promise<ScheduleRecord> {
    // Only what changes is a change: fields given with the values they have are left out, and a PATCH that
    // changes nothing writes nothing (no revision, no event); If-Match still holds it to the revision.
    const b = unchangedLeftOut(body, s);
    if (Object.keys(b).length === 0) {
      if (ifMatch !== undefined && ifMatch !== s.revision) throw new RevisionMismatch(s.revision, 'schedule');
      return s;
    }
    const now = app.store.clock.now();
    const set: Record<string, string> = { updated_at: String(now) };
    const del: string[] = [];
    const timing: Timing = { cron: s.cron, at: s.at, timezone: s.timezone };
    if (b.cron !== undefined) Object.assign(timing, { cron: b.cron, at: null });
    if (b.at !== undefined) Object.assign(timing, { cron: null, at: Date.parse(b.at) });
    if (b.timezone !== undefined) timing.timezone = b.timezone;
    const retimed = b.cron !== undefined || b.at !== undefined || b.timezone !== undefined;
    const resumed = b.paused === false && s.paused;
    if (retimed || resumed) {
      const given = { at: b.at !== undefined, timezone: b.timezone !== undefined };
      let next = checkTiming(timing, secondsCron, given, now);
      // An `at` not given again keeps its one fire: none once its time has passed (it fired, or it was missed while
      // paused, which a resume does not make up); a fire still to come (late) stays as the record has it.
      if (b.at === undefined && timing.at !== null && timing.at <= now) next = resumed ? null : s.nextRunAt;
      Object.assign(set, { cron: timing.cron ?? '', at: timing.at ?? '', timezone: timing.timezone });
      // A fire of the old timing that came due before this change and that no sweep has claimed yet still fires
      // (§7.6: each fire time gets its session; computed from now, the retiming dropped it without a trace): it stays
      // `next_run_at`, and its claim moves the schedule on to the new timing's first fire, `next_after_due`. Fires due
      // while paused are not made up by a resume (a paused schedule keeps no due fire).
      const due = s.nextRunAt;
      if (retimed && !s.paused && due !== null && due <= now && next !== due) {
        set['next_run_at'] = String(due);
        set['next_after_due'] = next === null ? '' : String(next);
      } else {
        del.push('next_after_due');
        if (next === null) del.push('next_run_at');
        else set['next_run_at'] = String(next);
      }
    }
    if (b.session !== undefined) {
      await checkCreate(app.sessionDeps, tenant, b.session);
      set['session'] = JSON.stringify(b.session);
    }
    if (b.overlap !== undefined) set['overlap'] = b.overlap;
    if (b.paused !== undefined) set['paused'] = b.paused ? '1' : '0';
    // The event names every field given, with its value but for `session` (a whole create body).
    const { session: _session, ...changes } = b;
    return store.update(s, set, del, { fields: Object.keys(b), ...changes }, ifMatch ?? s.revision);
  }

  app.post(
    '/v1/schedules',
    {
      schema: {
        operationId: 'createSchedule',
        summary: 'Create a schedule: a session created at each fire of a cron, or once at a time',
        tags,
        body: createScheduleBody,
        response: { 201: schedule, ...errors(400, 401, 409, 413, 415, 422, 429, 500, 503) },
      },
    },
    async (req, reply) => {
      const b = req.body;
      // A keyed create is named after its key (src/store/idempotency.ts `appliedToken`): a retry whose first
      // request died between the write and its answer's record finds the schedule made (listed again should the
      // crash have come before its index entry) and answers it instead of making a second one — before the body is
      // checked again (an `at` passed since would refuse the retry of a create that was made).
      const id = req.idempotency ? `sch_${req.idempotency.token}` : newScheduleId();
      const made = req.idempotency ? await store.read(id) : null;
      if (made && made.tenant === req.tenant) {
        await store.relist(made);
        reply.header('idempotent-replayed', 'true');
        return send(reply, made, 201);
      }
      const at = b.at === undefined ? null : Date.parse(b.at);
      const timing = { cron: b.cron ?? null, at, timezone: b.timezone };
      const now = app.store.clock.now();
      const next = checkTiming(timing, secondsCron, { at: true, timezone: true }, now);
      await checkCreate(app.sessionDeps, req.tenant, b.session);
      const s: ScheduleRecord = {
        id,
        tenant: req.tenant,
        revision: 1,
        ...timing,
        overlap: b.overlap,
        paused: b.paused,
        session: JSON.stringify(b.session),
        nextRunAt: next,
        pending: null,
        pendingUntil: 0,
        lastFireAt: null,
        lastSession: null,
        fires: 0,
        skips: 0,
        createdAt: now,
        updatedAt: now,
      };
      if (!(await store.create(s, maxPerTenant))) {
        // The same keyed create sent twice at once: the other one wrote it first; this one answers it.
        const first = await store.get(req.tenant, id);
        reply.header('idempotent-replayed', 'true');
        return send(reply, first, 201);
      }
      req.log.info({ schedule: s.id, tenant: s.tenant }, 'schedule created');
      return send(reply, s, 201);
    },
  );

  app.get(
    '/v1/schedules',
    {
      schema: {
        operationId: 'listSchedules',
        summary: "The caller's schedules, newest first",
        tags,
        querystring: pageQuery,
        response: { 200: scheduleList, ...errors(400, 401, 500, 503) },
      },
    },
    async (req) => {
      const page = await store.list(req.tenant, req.query.limit, req.query.cursor, LIST_PAGE_MAX_BYTES);
      return { data: page.items.map(scheduleView), next_cursor: page.next, has_more: page.next !== null };
    },
  );

  app.get(
    '/v1/schedules/:id',
    {
      schema: {
        operationId: 'getSchedule',
        summary: 'A schedule',
        tags,
        params: scheduleIdParam,
        response: { 200: schedule, ...routeErrors(NOT_FOUND, 400, 401, 404, 500, 503) },
      },
    },
    async (req, reply) => send(reply, await store.get(req.tenant, req.params.id)),
  );

  app.patch(
    '/v1/schedules/:id',
    {
      schema: {
        operationId: 'updateSchedule',
        summary: 'Pause, resume or change a schedule',
        description:
          'A change of `cron`, `at` or `timezone`, or a resume, computes the next fire from now: fires missed while paused are not made up; a fire of the old timing already due and not yet taken still fires first (`next_run_at` is its time until then).',
        tags,
        params: scheduleIdParam,
        body: patchScheduleBody,
        headers: ifMatchHeader,
        response: { 200: schedule, ...routeErrors(NOT_FOUND, 400, 401, 404, 412, 413, 415, 429, 500, 503) },
      },
    },
    async (req, reply) => {
      const ifMatch = await resolveIfMatch(
        req,
        async () => (await store.get(req.tenant, req.params.id)).revision,
      );
      // Each change is written at the revision it was computed from (so a byte count or a retiming never applies
      // twice); without If-Match a PATCH that lost a race is computed again from the record now.
      for (let attempt = 0; ; attempt++) {
        const s = await store.get(req.tenant, req.params.id);
        try {
          return send(reply, await patchOnce(s, req.body, req.tenant, ifMatch));
        } catch (err) {
          // A fire claimed meanwhile left the revision (If-Match still holds): the retiming is computed again.
          const again =
            err instanceof FireRaced || (err instanceof RevisionMismatch && ifMatch === undefined);
          if (again && attempt < CAS_ATTEMPTS) continue;
          throw err;
        }
      }
    },
  );

  app.delete(
    '/v1/schedules/:id',
    {
      schema: {
        operationId: 'deleteSchedule',
        summary: 'Delete a schedule (the sessions it created are kept)',
        tags,
        params: scheduleIdParam,
        headers: ifMatchHeader,
        response: {
          200: deletedSchedule,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 412, 413, 415, 429, 500, 503),
        },
      },
    },
    async (req) => {
      await store.remove(
        req.tenant,
        req.params.id,
        await resolveIfMatch(req, async () => (await store.get(req.tenant, req.params.id)).revision),
      );
      return { id: req.params.id, object: 'schedule' as const, deleted: true as const };
    },
  );

  app.get(
    '/v1/schedules/:id/runs',
    {
      schema: {
        operationId: 'listScheduleRuns',
        summary: 'The sessions the schedule created, newest fire first',
        tags,
        params: scheduleIdParam,
        querystring: pageQuery,
        response: { 200: sessionList, ...routeErrors(NOT_FOUND, 400, 401, 404, 500, 503) },
      },
    },
    async (req) => {
      const s = await store.get(req.tenant, req.params.id);
      const { cursor, limit } = req.query;
      if (cursor !== undefined && !/^\d{1,15}$/.test(cursor))
        throw new InvalidRequest('invalid_cursor', 'The cursor is not one this service gave.');
      // Each run's view and its JSON text, made once: the text measures the page and is the page.
      const views = new Map<SessionState, { view: ReturnType<typeof sessionView>; text: string }>();
      const viewOf = (st: SessionState) => {
        let v = views.get(st);
        if (!v) {
          const view = sessionView(st);
          v = { view, text: JSON.stringify(view) };
          views.set(st, v);
        }
        return v;
      };
      const page = await store.runsPage(
        s.id,
        req.tenant,
        { limit, before: cursor === undefined ? undefined : Number(cursor) },
        { maxBytes: LIST_PAGE_MAX_BYTES, sizeOf: (st) => Buffer.byteLength(viewOf(st).text) },
      );
      const items = page.items.map(viewOf);
      const next = page.next === null ? null : String(page.next);
      const body = { data: items.map((i) => i.view), next_cursor: next, has_more: next !== null };
      const text = `{"data":[${items.map((i) => i.text).join(',')}],"next_cursor":${JSON.stringify(next)},"has_more":${body.has_more}}`;
      return withText(body, text);
    },
  );

  app.get(
    '/v1/schedules/:id/events',
    {
      schema: {
        operationId: 'listScheduleEvents',
        summary: "The schedule's events (`schedule.fired`, `schedule.skipped`), oldest first",
        description: 'The envelope of section 4, whose `session_id` is the schedule id.',
        tags,
        params: scheduleIdParam,
        querystring: eventsQuery,
        response: { 200: eventPage, ...routeErrors(NOT_FOUND, 400, 401, 404, 500, 503) },
      },
    },
    async (req) => {
      const s = await store.get(req.tenant, req.params.id);
      const rows = await app.store.events(s.id, parseCursor(req.query.after)!, req.query.limit + 1);
      const page = rows.slice(0, req.query.limit).map((ev) => envelope(s.id, ev));
      const more = rows.length > req.query.limit;
      return { data: page, next_cursor: more ? page.at(-1)!.id : null, has_more: more };
    },
  );
};

export default routes;
