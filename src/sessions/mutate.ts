import type { ServerTool } from '../../tools/types.js';
import type { Engine } from '../engine/engine.js';
import { statusEvent } from '../engine/status.js';
import { InvalidStatus, RevisionMismatch, badRequest, revisionMismatch, zodDetails } from '../errors.js';
import { sessionParams, type SessionParams } from '../schemas.js';
import type { TaskQueue } from '../tenant-tools/tasks.js';
import type { Toolbox } from '../toolbox.js';
import type { SessionStore } from '../store/store.js';
import { encodeFields, type AppliedEntry, type SessionState, type Status } from '../store/session-state.js';
import { AlreadyApplied, setsRunning, type ApplyOps, type Guard } from '../store/apply-ops.js';
import { isOutOfMemory } from '../store/unavailable.js';

/**
 * A session whose write lets its sub-agents' sweep start a child (`Plan.spawns`) is due for that sweep this long after
 * the write at the latest, as a run is for the runs' sweep (src/store/runs.ts START_DUE_DELAY_MS).
 */
export const SPAWN_DUE_DELAY_MS = 2000;
/** How often a read-compute-write mutation is tried again when the session changed between its read and write. */
export const CAS_ATTEMPTS = 8;
/**
 * How many keyed requests' tokens a session remembers (lua/includes/recent.lua): a retry of an older one (its
 * answer lost in a crash, 64 keyed changes of the session later) is applied again.
 */
const APPLIED_KEEP = 64;

/** What the session operations work with. */
export interface SessionDeps {
  store: SessionStore;
  engine: Pick<Engine, 'kick'>;
  serverTools: ReadonlyMap<string, ServerTool>;
  /** Every source of tools (server tools, MCP servers, …): checks a session's `tools`. */
  toolbox: Toolbox;
  /** The tool tasks' queue: a cancelled or deleted session's calls are dropped from it. */
  tasks?: Pick<TaskQueue, 'settle'>;
  /**
   * The request's Idempotency-Key token (src/store/idempotency.ts `appliedToken`; set per request by the routes,
   * routes/mutations.ts `keyed`): `mutate` records it with its change, and a retry that finds it recorded answers
   * from the session as it is instead of changing it again.
   */
  applied?: string;
}

export interface MutationResult {
  state: SessionState;
  /**
   * The session as the change was worked out from: the read its write was guarded by (absent on a replay). A caller
   * that read something before the mutation (the chat's stream cursor) knows this read came after it, and before
   * any run the write started could change the session.
   */
  read?: SessionState;
  /**
   * The revision this call's write made (absent on a replay): the revision of each event it wrote (their envelope's
   * `revision`), which `state` may be past already (a run the write started commits before `state` is read).
   */
  wrote?: number;
  /** Work was queued (a run started or a follow-up waits): the route answers 202. */
  queued: boolean;
  /** The request's change was made before, by a request of the same Idempotency-Key whose answer was lost. */
  replayed?: boolean;
  /** Then: the record of that change (what its `Plan.applied` recorded with it). */
  entry?: AppliedEntry;
}

/** A mutation's write, worked out from the session as read. */
export interface Plan {
  ops: ApplyOps;
  /** What must still hold at the write; by default the revision read. */
  guard?: Guard;
  /** The write makes the session `running`: a run starts. */
  starts?: boolean;
  /** The params the write gives the session, when it changes them (a retry's): its run's model is theirs. */
  params?: SessionParams;
  /** A follow-up waits for the run in flight. */
  queued?: boolean;
  /** Done after the write (a control message to the run). */
  after?: () => Promise<void>;
  /**
   * The write lets the agents' sweep start a sub-agent's child with no run of the session's to end and wake its
   * tree member (src/store/runs.ts `end`): an agent call approved while its step's other calls still wait for their
   * decisions. The member is made due within SPAWN_DUE_DELAY_MS before the write (any replica's sweep looks then,
   * should this process die before the wake-up) and woken after it.
   */
  spawns?: boolean;
  /**
   * The sub-agents at work on the agent calls of the step the write drops (a retry's, a rerun's, a replaced
   * history's): no result of theirs answers a call any more. Each is made due for the agents' sweep within
   * SPAWN_DUE_DELAY_MS before the write and woken after it; the sweep's look cancels a child whose call its parent
   * no longer waits for (src/agents/sweep.ts `dropped`). So a process that dies between the write and the wake-up
   * leaves the cancel to any replica's sweep, not to the child's next run end (or its parent's stop).
   */
  drops?: readonly string[];
  /** Recorded with the request's Idempotency-Key token (AppliedEntry): what a retry of it answers with. */
  applied?: Pick<AppliedEntry, 'after' | 'message'>;
  /**
   * False: a run starts even over the tenant's daily dollar cap (429 `quota_exceeded` otherwise), the run then
   * stopping before its next model request (`tenant_budget_exhausted`): a run that goes on with the step it waits on
   * (a decision, a result, `continue` of a `requires_action` session: no new run, spec §7.4), and the service's own
   * answers, which must land.
   */
  costCap?: boolean;
  /**
   * False: a run starts whatever its model's price (one that sends nothing, the service's own answers: the engine
   * checks before each model request). By default a run is refused with 400 `unknown_model_price` for a model
   * without a price under a dollar ceiling (the session's `budget.cost_usd`, the tenant's cap).
   */
  priced?: boolean;
  /**
   * False for a write the service makes on its own (a worker's result delivered), and for a client's stop (a call's
   * denial): counted in the tenant's storage, never refused for it — the call must be answered, and a tenant at its
   * limit must be able to stop what spends, whatever it stores (default true).
   */
  storageCap?: boolean;
  /**
   * False for the service's own results (a worker's, a sub-agent's answer), which it holds to MAX_TURN_BYTES itself
   * (pending.ts `fitResults`): by default a write that takes the step's tool results past MAX_TURN_BYTES together is
   * refused (413 `payload_too_large`), in the script that writes them (store.apply `resultsCap`).
   */
  resultsCap?: boolean;
}

/** 412 unless the session is at the revision the client pinned with If-Match. */
export function checkIfMatch(s: SessionState, ifMatch: number | undefined): void {
  if (ifMatch !== undefined && s.revision !== ifMatch) throw revisionMismatch(s.revision);
}

/** Registers the run as due (any replica claims it if this one does not), then claims it here. */
export async function startRun(deps: SessionDeps, id: string): Promise<void> {
  await deps.store.runs.wake(id);
  deps.engine.kick(id);
}

/**
 * Read → check → guarded write, tried again when the session moved between the read and the write (unless the
 * client pinned a revision with If-Match, which then answers 412).
 */
export async function mutate(
  deps: SessionDeps,
  tenant: string,
  id: string,
  ifMatch: number | undefined,
  plan: (s: SessionState) => Promise<Plan>,
): Promise<MutationResult> {
  const { store, applied: token } = deps;
  for (let attempt = 0; ; attempt++) {
    const s = await store.loadFor(tenant, id);
    // Before If-Match and the plan: the change already made moved the revision and the status they check.
    const done = token !== undefined && s.applied?.find((e) => e.t === token);
    if (done) return { state: s, queued: done.q, replayed: true, entry: done };
    checkIfMatch(s, ifMatch);
    const p = await plan(s);
    // A run of a model without a price starts under no dollar ceiling (400 `unknown_model_price`), whenever the
    // ceiling came: the tenant's cap may be set after the session was made.
    if ((p.priced ?? true) && setsRunning(p.ops))
      store.spend.assertPriced(p.params ?? s.params, s.budget?.cost_usd);
    const guard: Guard = {
      ...(p.guard ?? { rev: s.revision }),
      ...(token !== undefined
        ? { applied: { t: token, q: Boolean(p.starts || p.queued), keep: APPLIED_KEEP, ...p.applied } }
        : {}),
    };
    // Before the write, as a run's due entry is (store.apply): due without the write is a look that finds nothing,
    // the write without its due entry a child that waits for the tree's next look (an hour).
    if (p.spawns) await store.runs.trees.soon(id, tenant, SPAWN_DUE_DELAY_MS);
    for (const child of p.drops ?? []) await store.runs.trees.soon(child, tenant, SPAWN_DUE_DELAY_MS);
    let wrote: number;
    try {
      ({ revision: wrote } = await store.apply(id, guard, p.ops, tenant, {
        costCap: p.costCap ?? true,
        storageCap: p.storageCap ?? true,
        resultsCap: p.resultsCap ?? true,
      }));
    } catch (err) {
      // Made meanwhile by a request of the same key (one whose process stalled past its lease): answered as it is.
      if (err instanceof AlreadyApplied)
        return {
          state: await store.loadFor(tenant, id),
          queued: err.entry.q,
          replayed: true,
          entry: err.entry,
        };
      const moved =
        (err instanceof RevisionMismatch && ifMatch === undefined) ||
        (err instanceof InvalidStatus && p.guard?.status);
      if (moved && attempt < CAS_ATTEMPTS) continue;
      throw err;
    }
    // The write registered the run as due (store.apply, as it made the session `running`): claimed here now.
    if (p.starts) deps.engine.kick(id);
    if (p.after) await p.after();
    // A sub-agent that waited for its client was answered (or moved on): its ancestors' `children.waiting` changed,
    // and the agents' sweep tells them now, not at the child's next run end (a refused ZADD, a full Redis: then).
    // A child to start (`spawns`): the sweep starts it now, not SPAWN_DUE_DELAY_MS later. After the write: a look
    // between the wake-up and the write would find nothing to do and move the member on.
    const woken = p.spawns || (s.parent && s.status === 'requires_action') ? [id] : [];
    // The dropped step's children: their looks cancel them now (each is due within SPAWN_DUE_DELAY_MS anyway).
    for (const member of [...woken, ...(p.drops ?? [])])
      await store.runs.trees.wake(member, tenant).catch((err: unknown) => {
        if (!isOutOfMemory(err)) throw err;
      });
    const state = await store.loadFor(tenant, id);
    return { state, read: s, wrote, queued: Boolean(p.starts || p.queued) };
  }
}

/** Status change ops with its `session.status` event. */
export function statusOps(s: SessionState, next: Partial<SessionState> & { status: Status }): ApplyOps {
  const merged = { ...s, ...next };
  return {
    hset: encodeFields(next),
    events: [['session.status', statusEvent({ ...merged, actionDue: merged.action.due })]],
  };
}

/** Ops that start a new run from `s` (a user turn or a decision), as `running`. */
export function runOps(s: SessionState, extra: Partial<SessionState> = {}): ApplyOps {
  return statusOps(s, {
    status: 'running',
    stopReason: null,
    error: null,
    control: '',
    ...(s.status === 'idle' || s.status === 'failed' ? { runStart: s.iteration } : {}),
    ...extra,
  });
}

/** Params after a change: a `null` value removes the field. Checked as a whole. */
export function mergeParams(current: SessionParams, change: Record<string, unknown>): SessionParams {
  const merged: Record<string, unknown> = { ...current };
  for (const [k, v] of Object.entries(change)) {
    if (v === null) delete merged[k];
    else merged[k] = v;
  }
  const parsed = sessionParams.safeParse(merged);
  if (!parsed.success) throw badRequest('Invalid params.', zodDetails(parsed.error.issues, ['params']));
  return parsed.data;
}
