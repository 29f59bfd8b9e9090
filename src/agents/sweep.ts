import type { FastifyBaseLogger as Logger } from 'fastify';
import { childBudget, reservedBy, type Spent } from '../engine/budget.js';
import { usdToMicros } from '../cost/prices.js';
import { Conflict, NotFound, isQuota, SessionExists, isRefusal } from '../errors.js';
import { createSessionBody, isAgentTool, type AgentTool } from '../schemas.js';
import { cancelRun, removeSession } from '../sessions/control.js';
import { createSession } from '../sessions/create.js';
import type { SessionDeps } from '../sessions/mutate.js';
import { submitResults } from '../sessions/tool-calls.js';
import type { RedisClient } from '../store/lua-commands.js';
import type { SessionState } from '../store/session-state.js';
import type { SessionStore } from '../store/store.js';
import type { TreeEntry } from '../store/tree-due.js';
import { SweepLoop } from '../sweep-loop.js';
import { childSessionId, WaitingTree, type ChildWaiting } from './waiting.js';
import { childResult, type ChildResult } from './child-result.js';
import { childrenPage } from './children-page.js';
import { FailureLog } from '../log.js';
import { atWork, waitsFor } from './dropped.js';
import { userText } from '../message-schemas.js';

/**
 * Sub-agents (spec §7.6). A call to an `agent` tool is a client call to the engine: the parent's run ends at
 * `requires_action` (it holds no run slot). This sweep answers it: it creates the child session under an id
 * derived from the parent and the call (so a sweep that runs twice, on any replica, creates it once), and when the
 * child's run ends (`idle`, `failed`) it submits the child's final text as the call's result with `continue`, which
 * starts the parent's next run. Every session of a tree is a member of its tenant's due set (src/store/tree-due.ts);
 * the end of any of its runs moves it to now (RunQueue.end, which the runs' own sweep retries after a crash), so a
 * child that ends while its parent's replica is dead still wakes the parent, and so does a child's delete. A parked parent is looked at
 * again after RECHECK_MS only while a child of its could not be started yet (a quota for now); else after PARKED_MS,
 * a safety net, so a tenant's parked trees do not fill the sweep that every tenant's trees share; a pass takes every
 * due tenant's members round robin. A look moves its member on only if nothing woke it meanwhile (`settle`).
 */

const BATCH = 50;
const RECHECK_MS = 10_000;
/**
 * A parent parked on children at work: looked at again after this, a safety net (their run ends, a child's delete,
 * a child failed by its deadline or taken out of review by a history replaced, bring it back at once). Six times
 * fewer looks than RECHECK_MS: a tenant's 1,500 parked trees take 25 a second, not 150.
 */
const PARKED_MS = 60_000;
/** Members with nothing to do wait this long before a look (their next run end brings them back sooner). */
const IDLE_MS = 3_600_000;

/** A refusal of a cancel or delete (the session ended or went meanwhile) is what it was for; anything else throws. */
const refusal = (err: unknown): void => {
  if (!isRefusal(err)) throw err;
};

export const childrenKey = (parentId: string) => `s:{${parentId}}:children`;

export interface AgentSweepOptions {
  redis: RedisClient;
  store: SessionStore;
  /** What the operations on sessions need (src/sessions/*.ts): a child's create, a result, a cancel, a delete. */
  deps: SessionDeps;
  log: Logger;
  sweepMs: number;
  /** TENANT_MAX_SESSIONS (0: none): children count like created sessions. */
  maxSessions: number;
}

export class AgentSweep {
  private readonly loop: SweepLoop;
  private readonly tree: WaitingTree;

  constructor(private readonly opts: AgentSweepOptions) {
    this.tree = new WaitingTree(opts.redis, opts.store);
    this.loop = new SweepLoop(() => this.sweep(), opts.sweepMs, new FailureLog(opts.log, 'agents sweep'));
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  private async sweep(): Promise<void> {
    const trees = this.opts.store.runs.trees;
    // Round robin across the tenants with members due (src/store/tree-due.ts): one tenant's burst of ends does not
    // hold back another tenant's trees.
    // Due by Redis's clock, and moved on in it (src/store/tree-due.ts): times below are durations from its now.
    for (const e of await trees.due(BATCH)) {
      if (this.loop.stopping) return;
      await this.tick(e).catch(async (err: unknown) => {
        this.opts.log.warn({ err, session: e.id }, 'agents tick failed');
        // Looked at again later, not at once: a member that keeps failing (its tenant over a quota, say) must not
        // come back first on every pass and fill its tenant's share.
        await trees.settle(e, RECHECK_MS).catch(() => {});
      });
    }
  }

  /**
   * One look at a member. It is moved on at the end only if its score is still the one read (`settle`): a run's end
   * (or a child's delete) during the look moved it to now, and that wake-up must not be lost to the look's own next
   * time (a parked parent's is a minute away).
   */
  private async tick(e: TreeEntry): Promise<void> {
    const { store } = this.opts;
    const { id } = e;
    const s = await store.load(id);
    if (!s) {
      await this.removeChildren(id);
      await store.runs.trees.settle(e, null);
      return;
    }
    let next = IDLE_MS;
    if (await this.dropped(s)) {
      // Its cancel ends its run (and so wakes it): that look counts what it spent and cancels its own children.
      await cancelRun(this.opts.deps, s.tenant, id).catch(refusal);
    } else if (s.status === 'idle' || s.status === 'failed') {
      if (s.parent) await this.deliver(s);
      await this.cancelChildren(s);
    } else if (s.status === 'requires_action') {
      // A child it could not start yet (its tenant's runs all busy): tried again soon. A parent whose children are
      // all at work waits for nothing here: the end of a child's run brings the child, which answers it.
      const spawned = await this.spawn(s);
      if (spawned !== 'none') next = spawned === 'later' ? RECHECK_MS : PARKED_MS;
    }
    // Before the member is moved on: a crash here leaves it due, so the next look tells what this one did not.
    await this.tree.tellUp(id);
    await store.runs.trees.settle(e, next, s.tenant);
  }

  /**
   * A child at work on a call its parent no longer waits for: the step was dropped (`retry`, a rerun, a replaced
   * history), the call answered otherwise (its client, a deadline), or the parent stopped. A parent gone is left to
   * the parent's own look, which deletes its children.
   */
  private async dropped(s: SessionState): Promise<boolean> {
    if (!s.parent || !atWork(s)) return false;
    const parent = await this.opts.store.load(s.parent.session_id);
    return parent !== null && !waitsFor(parent, s.parent.tool_use_id);
  }

  /**
   * Creates the children of the parent's unanswered agent calls (once each); answers those already done. The
   * children at work on the others are looked at first: what they may still spend is kept out of a new child's
   * budget (`reservedBy`). `later` when a child could not be started yet (a quota for now: the parent is looked at
   * again soon), `parked` when its children are at work, `none` when it waits for no child.
   */
  private async spawn(parent: SessionState): Promise<'later' | 'parked' | 'none'> {
    const { redis, store } = this.opts;
    // A reply under review (`pause_after_turn`): its calls wait for `continue`, which runs them (approvals first),
    // so none has a child yet. `continue` sends the parent's step to the engine; its run's end brings it back here.
    if (parent.pending?.turn) return 'none';
    const agents = new Map(parent.tools.filter(isAgentTool).map((t) => [t.name, t]));
    // A call that waits for its approval (or was denied, its denial not yet written as its result) has no child.
    const calls = (parent.pending?.calls ?? []).filter(
      (c) =>
        c.kind === 'client' &&
        !c.result &&
        agents.has(c.name) &&
        (c.approval === 'auto' || c.approval === 'approved'),
    );
    const reserved = { tokens: 0, micros: 0 };
    const missing: typeof calls = [];
    for (const c of calls) {
      const childId = childSessionId(parent.id, c.id);
      // The mark first, then the child: a mark above 0 is written only after the child exists, so a mark read
      // before a load that finds nothing means the child was deleted. The other order races another replica's
      // sweep creating the child between the two reads (a miss, then its mark) and answers a live child "deleted".
      const created = Number((await redis.zscore(childrenKey(parent.id), childId)) ?? 0) > 0;
      const child = await store.load(childId);
      if (child) {
        // A create that died before its mark (or lost it to another replica's 0): marked now, so a later delete of
        // the child is answered as one, never created again.
        if (!created) await redis.agentsChildrenMark(childrenKey(parent.id), childId);
        const r = reservedBy(child);
        reserved.tokens += r.tokens;
        reserved.micros += r.micros;
        if (child.status === 'idle' || child.status === 'failed') await this.deliver(child);
        continue;
      }
      // Mark 0 or none: the create may not have happened (a crash, or it is under way on another replica).
      if (created) {
        await this.answer(parent, c.id, {
          content: "Error: the sub-agent's session was deleted.",
          is_error: true,
        });
        continue;
      }
      missing.push(c);
    }
    let later = false;
    for (const [i, c] of missing.entries()) {
      const refused = await this.create(
        parent,
        agents.get(c.name)!,
        c.id,
        c.input,
        reserved,
        missing.length - i,
      );
      if (refused === 'later') later = true;
      else if (refused) await this.answer(parent, c.id, refused);
    }
    return later ? 'later' : calls.length > 0 ? 'parked' : 'none';
  }

  /**
   * Creates the child; the result to answer the call with when the create is refused, `later` when the refusal is
   * for now only (TENANT_MAX_ACTIVE_RUNS: tried again at the next look), else null. It is one of `ways` children
   * started together, which share what is left of the budget; its budget is added to `reserved`.
   */
  private async create(
    parent: SessionState,
    agent: AgentTool,
    toolUseId: string,
    input: unknown,
    reserved: Spent,
    ways: number,
  ): Promise<ChildResult | 'later' | null> {
    const { redis, store } = this.opts;
    const childId = childSessionId(parent.id, toolUseId);
    const prompt = (input as { prompt?: unknown } | null)?.prompt;
    // The child's `input` takes text that is not blank (as create checks it): a blank prompt is the model's to fix.
    if (!userText.safeParse(prompt).success)
      return { content: 'Error: give the sub-agent a `prompt` (a string, not blank).', is_error: true };
    const body = createSessionBody.safeParse({ ...agent.session, input: prompt });
    if (!body.success) return { content: `Error: the sub-agent's session is invalid.`, is_error: true };
    const budget = childBudget(parent, body.data.budget, reserved, ways);
    if (budget === 'spent')
      return {
        content: "Error: the sub-agent could not start: this session's budget is spent.",
        is_error: true,
      };
    body.data.budget = budget;
    const max = this.opts.maxSessions;
    if (max > 0 && (await store.index.count(parent.tenant)) >= max)
      return {
        content: `Error: the sub-agent could not start: TENANT_MAX_SESSIONS (${max}) reached.`,
        is_error: true,
      };
    // NX: never over a mark written once the child existed (another replica's create that went first).
    await redis.zadd(childrenKey(parent.id), 'NX', 0, childId);
    try {
      const depth = (parent.parent?.depth ?? 1) + 1;
      await createSession(this.opts.deps, parent.tenant, body.data, childId, {
        session_id: parent.id,
        tool_use_id: toolUseId,
        depth,
      });
    } catch (err) {
      // Its tenant's runs are all busy for now: no answer, the next look (RECHECK_MS) tries again.
      if (isQuota(err, 'TENANT_MAX_ACTIVE_RUNS')) return 'later';
      if (isRefusal(err) && !(err instanceof SessionExists))
        return { content: `Error: the sub-agent could not start: ${err.message}`, is_error: true };
      if (!(err instanceof SessionExists)) throw err;
    }
    await redis.agentsChildrenMark(childrenKey(parent.id), childId);
    // The new child's ceilings (where the parent has none, the child spends nothing of it: 0).
    reserved.tokens += budget?.total_tokens ?? 0;
    reserved.micros += budget?.cost_usd === undefined ? 0 : usdToMicros(budget.cost_usd);
    await this.stillWanted(parent, toolUseId, childId);
    this.opts.log.info({ session: parent.id, child: childId, tenant: parent.tenant }, 'sub-agent started');
    return null;
  }

  /**
   * After a create: a parent deleted meanwhile (its sweep found no child yet and forgot it) takes its child with it;
   * a parent that no longer waits for the call (cancelled, answered by its client) has the child cancelled.
   */
  private async stillWanted(parent: SessionState, toolUseId: string, childId: string): Promise<void> {
    const now = await this.opts.store.load(parent.id);
    if (!now) {
      await removeSession(this.opts.deps, parent.tenant, childId).catch(refusal);
      return;
    }
    const call = now.pending?.calls.find((c) => c.id === toolUseId);
    if (now.status !== 'requires_action' || !call || call.result)
      await cancelRun(this.opts.deps, parent.tenant, childId).catch(refusal);
  }

  /**
   * The ended child's usage into its parent's `u_child_*` (once per child, src/store/lua/child-usage-1.lua: whether or not its result
   * still answers the call — a parent cancelled meanwhile, or whose client answered the call itself, keeps the cost),
   * then its result into the call (409 and 404 mean it was answered, or the parent is gone).
   */
  private async deliver(child: SessionState): Promise<void> {
    const ref = child.parent!;
    await this.opts.store.addChildUsage(ref.session_id, child);
    const parent = await this.opts.store.load(ref.session_id);
    // A parent whose reply is under review takes no result: its answer with `continue` would end the review. The
    // review's `continue` brings the parent back to `spawn`, which answers the call from the ended child.
    if (!parent || parent.status !== 'requires_action' || parent.pending?.turn) return;
    const result = await childResult(this.opts.store, child, this.opts.deps.toolbox.resultMaxBytes);
    await this.answer(parent, ref.tool_use_id, result);
  }

  private async answer(parent: SessionState, toolUseId: string, result: ChildResult): Promise<void> {
    try {
      await submitResults(
        this.opts.deps,
        parent.tenant,
        parent.id,
        [{ tool_use_id: toolUseId, ...result }],
        true,
        undefined,
        true,
      );
    } catch (err) {
      if (err instanceof Conflict || err instanceof NotFound) return;
      throw err;
    }
  }

  /** A parent that stopped (cancelled, failed, idle): its children still working are cancelled. */
  private async cancelChildren(parent: SessionState): Promise<void> {
    for (const id of await this.opts.redis.zrange(childrenKey(parent.id), 0, -1)) {
      const c = await this.opts.store.load(id);
      if (!c || (c.status !== 'running' && c.status !== 'requires_action')) continue;
      await cancelRun(this.opts.deps, c.tenant, id).catch(refusal);
    }
  }

  /** A deleted parent: its children are deleted too (each its own children in turn, when swept). */
  private async removeChildren(parentId: string): Promise<void> {
    const key = childrenKey(parentId);
    for (const id of await this.opts.redis.zrange(key, 0, -1)) {
      const c = await this.opts.store.load(id);
      if (c) await removeSession(this.opts.deps, c.tenant, id).catch(refusal);
    }
    await this.opts.redis.del(key);
  }

  /** What `GET /v1/sessions/:id` shows as `required_action.children_waiting` (waiting.ts). */
  waiting(s: SessionState): Promise<ChildWaiting[]> {
    return this.tree.waiting(s);
  }

  /** A page of the session's children, oldest first (children-page.ts; the session is the tenant's). */
  children(
    tenant: string,
    parentId: string,
    opts: { limit: number; cursor?: string | undefined },
    bound: { maxBytes: number; sizeOf: (s: SessionState) => number },
  ): Promise<{ items: SessionState[]; next: string | null }> {
    return childrenPage(this.opts.redis, this.opts.store, childrenKey(parentId), tenant, opts, bound);
  }
}
