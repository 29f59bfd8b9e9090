import type { z } from 'zod';
import type { SessionParams } from '../schemas.js';
import type { ServerTool } from '../../tools/types.js';
import { cancelSession } from '../engine/commit.js';
import type { Engine } from '../engine/engine.js';
import { statusEvent } from '../engine/status.js';
import { AppError, badRequest, conflict, revisionMismatch, zodDetails } from '../errors.js';
import { checkHistory, pendingToolCalls, asBlocks, type StoredMessage } from '../history.js';
import {
  sessionParams,
  type CreateSessionBody,
  type decisionBody,
  type forkBody,
  type patchSessionBody,
  type postMessageBody,
  type retryBody,
  type toolResultBody,
  type toolResultsBody,
} from '../schemas.js';
import {
  encodeFields,
  newSessionId,
  type ApplyOps,
  type IterationRecord,
  type Guard,
  type PendingStep,
  type SessionState,
  type SessionStore,
  type Status,
} from '../store/store.js';
import { sessionView } from './view.js';

export const DEFAULT_MODEL = 'claude-sonnet-5-5';
export const DEFAULT_MAX_TOKENS = 1024;

/** How often a read-compute-write mutation is tried again when the session changed between its read and write. */
const CAS_ATTEMPTS = 8;

export interface MutationResult {
  state: SessionState;
  /** Work was queued (a run started or a follow-up waits): the route answers 202. */
  queued: boolean;
}

/** Store user turns with array content: queued follow-ups are appended to them by string concatenation in Lua. */
export function normalize(m: StoredMessage): StoredMessage {
  return m.role === 'user' && typeof m.content === 'string'
    ? { role: 'user', content: asBlocks(m.content) }
    : m;
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

function forkMetadata(
  base: Record<string, unknown>,
  extra: Record<string, unknown> | undefined,
  from: string,
  at: number,
): Record<string, unknown> {
  const merged = { ...base, ...extra, forked_from: from, forked_at_iteration: at };
  if (Object.keys(merged).length > 32) {
    throw badRequest('The fork would have more than 32 metadata keys.', [
      {
        path: '/metadata',
        code: 'too_big',
        message: 'at most 32 metadata keys, forked_from and forked_at_iteration included',
      },
    ]);
  }
  return merged;
}

const emptyUsage = () => ({
  input_tokens: 0,
  output_tokens: 0,
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: 0,
});

const blocksInner = (content: string | Array<Record<string, any>>) =>
  JSON.stringify(asBlocks(content)).slice(1, -1);

/**
 * The operations on sessions behind the REST routes and the WebSocket frames, so both run the same checks.
 * Every mutation is read → check → one guarded `apply` (revision from If-Match, or the one read, or the status),
 * tried again if the session moved in between.
 */
export class SessionService {
  constructor(
    readonly store: SessionStore,
    readonly engine: Engine,
    readonly serverTools: ReadonlyMap<string, ServerTool>,
  ) {}

  async create(tenant: string, body: CreateSessionBody): Promise<SessionState> {
    const params = sessionParams.safeParse({
      model: DEFAULT_MODEL,
      max_tokens: DEFAULT_MAX_TOKENS,
      ...body.params,
      ...(body.model ? { model: body.model } : {}),
      ...(body.max_tokens ? { max_tokens: body.max_tokens } : {}),
      ...(body.system !== undefined ? { system: body.system } : {}),
    });
    if (!params.success) throw badRequest('Invalid params.', zodDetails(params.error.issues, ['params']));
    this.checkTools(body.tools);
    const messages: StoredMessage[] = (
      body.messages ?? (body.input ? [{ role: 'user' as const, content: body.input }] : [])
    ).map((m) => normalize(m as StoredMessage));
    const problems = checkHistory(messages);
    if (problems.length) {
      throw new AppError(
        400,
        'invalid_history',
        `The messages break the Messages API's rules: ${problems[0]!.message}.`,
        problems,
      );
    }
    const last = messages.at(-1);
    if (body.start && last?.role === 'assistant' && pendingToolCalls(messages).length === 0) {
      throw new AppError(
        400,
        'invalid_history',
        'To start a run the history must end with a user turn, or with an assistant turn whose tool calls the service answers (assistant prefill is not supported).',
      );
    }
    if (body.start && messages.length === 0) {
      throw badRequest('Give `messages` or `input` to start a session, or `start: false`.');
    }
    const now = Date.now();
    const start = body.start && messages.length > 0;
    const state: SessionState = {
      id: newSessionId(),
      tenant,
      status: start ? 'running' : 'idle',
      revision: 0,
      iteration: 0,
      runStart: 0,
      params: params.data,
      tools: body.tools,
      maxIterations: body.max_iterations,
      approval: body.approval,
      review: body.review_tool_results,
      onToolError: body.on_tool_error,
      onMaxTokens: body.on_max_tokens,
      cacheToolResults: body.cache_tool_results,
      stream: body.stream,
      pending: null,
      stopReason: null,
      error: null,
      usage: emptyUsage(),
      metadata: body.metadata,
      createdAt: now,
      updatedAt: now,
      fence: 0,
      msgCount: messages.length,
      control: '',
      paramsRev: 0,
    };
    await this.insert(state, messages, []);
    if (start) await this.startRun(state.id);
    return state;
  }

  /** Indexes a new session, then writes it (fields, history, iteration records, `session.created`) in one script. */
  private async insert(
    state: SessionState,
    history: StoredMessage[],
    records: IterationRecord[],
    createdExtra: Record<string, unknown> = {},
  ): Promise<void> {
    // Indexed first: if the session write then fails, `list` drops the dangling index entry; the other order could
    // leave a session that exists but is never listed.
    await this.store.index(state.tenant, state.id, state.createdAt);
    const res = await this.store.apply(
      state.id,
      { create: true },
      {
        hset: encodeFields(state),
        push_msgs: history.map((m) => JSON.stringify(m)),
        push_iters: records.map((r) => JSON.stringify(r)),
        events: [
          ['session.created', JSON.stringify({ ...sessionView({ ...state, revision: 1 }), ...createdExtra })],
          ['session.status', statusEvent(state)],
        ],
      },
    );
    state.revision = res.revision;
  }

  private checkTools(tools: CreateSessionBody['tools']): void {
    const names = new Set<string>();
    for (const t of tools) {
      const name = typeof t === 'string' ? t : t.name;
      if (typeof t === 'string' && !this.serverTools.has(t)) {
        throw new AppError(
          400,
          'unknown_tool',
          `There is no server tool named "${t}". GET /v1/tools lists them.`,
          {
            tool: t,
          },
        );
      }
      if (typeof t !== 'string' && this.serverTools.has(t.name)) {
        throw new AppError(
          400,
          'tool_name_conflict',
          `"${t.name}" is the name of a server tool; name the client tool otherwise.`,
        );
      }
      if (names.has(name)) throw new AppError(400, 'duplicate_tool', `The tool "${name}" is given twice.`);
      names.add(name);
    }
  }

  private async startRun(id: string): Promise<void> {
    await this.store.markDue(id, Date.now() + 2000);
    this.engine.kick(id);
  }

  /**
   * Read → check → guarded write, tried again when the session moved between the read and the write (unless the
   * client pinned a revision with If-Match, which then answers 412).
   */
  private async mutate(
    tenant: string,
    id: string,
    ifMatch: number | undefined,
    plan: (s: SessionState) => Promise<{
      ops: ApplyOps;
      guard?: Guard;
      starts?: boolean;
      queued?: boolean;
      after?: () => Promise<void>;
    }>,
  ): Promise<MutationResult> {
    for (let attempt = 0; ; attempt++) {
      const s = await this.store.loadFor(tenant, id);
      if (ifMatch !== undefined && s.revision !== ifMatch)
        throw new AppError(412, 'revision_mismatch', `The session is at revision ${s.revision}.`, {
          revision: s.revision,
        });
      const p = await plan(s);
      try {
        await this.store.apply(id, p.guard ?? { rev: s.revision }, p.ops);
      } catch (err) {
        const moved =
          err instanceof AppError &&
          ((err.code === 'revision_mismatch' && ifMatch === undefined) ||
            (err.code === 'invalid_status' && p.guard?.status));
        if (moved && attempt < CAS_ATTEMPTS) continue;
        throw err;
      }
      if (p.starts) await this.startRun(id);
      if (p.after) await p.after();
      const state = await this.store.loadFor(tenant, id);
      return { state, queued: Boolean(p.starts || p.queued) };
    }
  }

  /** Status change ops with its `session.status` event. */
  private statusOps(s: SessionState, next: Partial<SessionState> & { status: Status }): ApplyOps {
    const merged = { ...s, ...next };
    return {
      hset: encodeFields(next),
      events: [['session.status', statusEvent(merged)]],
    };
  }

  /** Ops that start a new run from `s` (a user turn or a decision), as `running`. */
  private runOps(s: SessionState, extra: Partial<SessionState> = {}): ApplyOps {
    return this.statusOps(s, {
      status: 'running',
      stopReason: null,
      error: null,
      control: '',
      ...(s.status === 'idle' || s.status === 'failed' ? { runStart: s.iteration } : {}),
      ...extra,
    });
  }

  async addMessage(tenant: string, id: string, body: z.infer<typeof postMessageBody>, ifMatch?: number) {
    const content = body.content ?? body.text!;
    const message: StoredMessage = { role: 'user', content: asBlocks(content) };
    const inner = blocksInner(content);
    return this.mutate(tenant, id, ifMatch, async (s) => {
      const queuedEvent: [string, string] = [
        'message.queued',
        JSON.stringify({ message, interrupt: body.interrupt }),
      ];
      if (s.status === 'running' || s.status === 'requires_action') {
        const interrupt = body.interrupt && s.status === 'running';
        return {
          guard: { status: [s.status], ...(ifMatch !== undefined ? { rev: ifMatch } : {}) },
          ops: {
            queue_push: [inner],
            events: [queuedEvent],
            ...(interrupt ? { hset: { control: 'interrupt' } } : {}),
          },
          queued: true,
          ...(interrupt ? { after: () => this.store.publishControl(id, 'interrupt') } : {}),
        };
      }
      // A new message on a failed tool step accepts its results as they stand: they go to the model as they are.
      const run = this.runOps(
        s,
        s.status === 'failed' && s.pending ? { pending: { ...s.pending, review: true } } : {},
      );
      return {
        guard: { status: [s.status], ...(ifMatch !== undefined ? { rev: ifMatch } : {}) },
        ops: { ...run, queue_push: [inner], events: [queuedEvent, ...run.events!] },
        starts: true,
      };
    });
  }

  private requirePending(s: SessionState, toolUseId: string) {
    if (s.status !== 'requires_action' && s.status !== 'failed') {
      throw conflict('nothing_awaits_action', `The session is ${s.status}; no tool call waits for a client.`);
    }
    const call = s.pending?.calls.find((c) => c.id === toolUseId);
    if (!s.pending || !call) {
      throw conflict('unknown_tool_use_id', `No pending tool call has the id ${toolUseId}.`, {
        tool_use_id: toolUseId,
      });
    }
    return { step: structuredClone(s.pending), call: s.pending.calls.indexOf(call) };
  }

  /** Whether the pending step can go on without a client: no decision and no client result missing. */
  private ready(step: PendingStep): boolean {
    return !step.calls.some((c) => c.approval === 'required' || (c.kind === 'client' && !c.result));
  }

  async decide(
    tenant: string,
    id: string,
    toolUseId: string,
    body: z.infer<typeof decisionBody>,
    ifMatch?: number,
  ) {
    return this.mutate(tenant, id, ifMatch, async (s) => {
      if (s.status !== 'requires_action' || !s.pending?.calls.some((c) => c.approval !== 'auto')) {
        throw conflict('nothing_awaits_approval', 'No tool call of this session waits for a decision.');
      }
      const { step, call: i } = this.requirePending(s, toolUseId);
      const call = step.calls[i]!;
      if (call.approval === 'auto')
        throw conflict('approval_not_required', `The call ${toolUseId} needs no decision.`);
      if (call.approval !== 'required')
        throw conflict('tool_call_already_decided', `The call ${toolUseId} was already ${call.approval}.`);
      const ops: ApplyOps = {};
      if (body.decision === 'deny') {
        call.approval = 'denied';
        if (body.reason) call.reason = body.reason;
      } else {
        call.approval = 'approved';
        if (body.input) {
          const tool = this.serverTools.get(call.name);
          try {
            tool?.tool.parse?.(body.input);
          } catch (err) {
            throw new AppError(
              400,
              'invalid_tool_input',
              `The edited input does not fit ${call.name}'s schema.`,
              (err as { issues?: z.core.$ZodIssue[] })?.issues
                ? zodDetails((err as { issues: z.core.$ZodIssue[] }).issues, ['input'])
                : String(err),
            );
          }
          call.input = body.input;
          // The model must see the call that ran: the edited input replaces the call's input in the history.
          const last = await this.store.lastMessage(id);
          if (!last) throw conflict('unknown_tool_use_id', 'The history has no such call.');
          const edited = {
            ...last,
            content: (last.content as Array<Record<string, any>>).map((b) =>
              b.type === 'tool_use' && b.id === toolUseId ? { ...b, input: body.input } : b,
            ),
          };
          ops.lset_msgs = [[s.msgCount - 1, JSON.stringify(edited)]];
        }
      }
      const decided: [string, string] = [
        'tool_call.decided',
        JSON.stringify({
          tool_use_id: toolUseId,
          decision: body.decision,
          input: body.input,
          reason: body.reason,
        }),
      ];
      const goes = !step.calls.some((c) => c.approval === 'required');
      const st = goes
        ? this.runOps(s, { pending: step })
        : this.statusOps(s, { status: 'requires_action', pending: step });
      return {
        ops: {
          ...ops,
          hset: { ...st.hset, pending: JSON.stringify(step) },
          events: [decided, ...st.events!],
        },
        starts: goes,
      };
    });
  }

  /** One result: a client tool's, or a replacement of a result under review. */
  private applyResult(
    s: SessionState,
    step: PendingStep,
    toolUseId: string,
    r: { content: any; is_error?: boolean | undefined },
  ) {
    const call = step.calls.find((c) => c.id === toolUseId);
    if (!call)
      throw conflict('unknown_tool_use_id', `No pending tool call has the id ${toolUseId}.`, {
        tool_use_id: toolUseId,
      });
    const result = { content: r.content, is_error: r.is_error ?? false };
    if (step.review && call.result) {
      call.result = result;
      return ['tool_result.replaced', JSON.stringify({ tool_use_id: toolUseId, ...result })] as [
        string,
        string,
      ];
    }
    if (call.kind === 'client' && !call.result) {
      call.result = result;
      return ['tool_result.submitted', JSON.stringify({ tool_use_id: toolUseId, ...result })] as [
        string,
        string,
      ];
    }
    if (call.result)
      throw conflict('tool_result_already_submitted', `The call ${toolUseId} already has its result.`);
    throw conflict(
      'tool_result_not_expected',
      `The call ${toolUseId} is a server tool call that has not run; it takes no result now.`,
    );
  }

  async putResult(
    tenant: string,
    id: string,
    toolUseId: string,
    body: z.infer<typeof toolResultBody>,
    ifMatch?: number,
  ) {
    return this.results(tenant, id, [{ tool_use_id: toolUseId, ...body }], false, ifMatch);
  }

  async results(
    tenant: string,
    id: string,
    results: z.infer<typeof toolResultsBody>['results'],
    go: boolean,
    ifMatch?: number,
  ) {
    return this.mutate(tenant, id, ifMatch, async (s) => {
      if (s.status !== 'requires_action' || !s.pending) {
        throw conflict('nothing_awaits_results', `The session is ${s.status}; no tool result is expected.`);
      }
      const step = structuredClone(s.pending);
      const events = results.map((r) => this.applyResult(s, step, r.tool_use_id, r));
      // Client results alone let the run go on; reviewed results wait for `continue`.
      const goes = this.ready(step) && (go || !step.review);
      const st = goes
        ? this.runOps(s, { pending: step })
        : this.statusOps(s, { status: 'requires_action', pending: step });
      return {
        ops: { hset: { ...st.hset, pending: JSON.stringify(step) }, events: [...events, ...st.events!] },
        starts: goes,
      };
    });
  }

  async continue(tenant: string, id: string, ifMatch?: number) {
    return this.mutate(tenant, id, ifMatch, async (s) => {
      if (s.status === 'idle' && s.stopReason === 'max_iterations') {
        // A fresh iteration budget: the run goes on from the tool results it stopped after.
        return { ops: this.runOps(s), starts: true };
      }
      if (s.status !== 'requires_action' || !s.pending)
        throw conflict('nothing_to_continue', `The session is ${s.status}.`);
      if (!this.ready(s.pending)) {
        throw conflict('tool_calls_undecided', 'Some calls still wait for a decision or a client result.', {
          required_action: sessionView(s).required_action,
        });
      }
      return { ops: this.runOps(s, { pending: { ...s.pending, review: true } }), starts: true };
    });
  }

  async patch(tenant: string, id: string, body: z.infer<typeof patchSessionBody>, ifMatch?: number) {
    return this.mutate(tenant, id, ifMatch, async (s) => {
      const next: Partial<SessionState> = {};
      if (body.params) next.params = mergeParams(s.params, body.params);
      if (body.max_iterations !== undefined) next.maxIterations = body.max_iterations;
      if (body.approval !== undefined) next.approval = body.approval;
      if (body.review_tool_results !== undefined) next.review = body.review_tool_results;
      if (body.on_tool_error !== undefined) next.onToolError = body.on_tool_error;
      if (body.on_max_tokens !== undefined) next.onMaxTokens = body.on_max_tokens;
      if (body.cache_tool_results !== undefined) next.cacheToolResults = body.cache_tool_results;
      if (body.stream !== undefined) next.stream = body.stream;
      if (body.metadata !== undefined) next.metadata = body.metadata;
      return {
        ops: {
          hset: encodeFields(next),
          hincr: { params_rev: 1 },
          events: [
            ...(body.params
              ? [['params.updated', JSON.stringify({ params: body.params })] as [string, string]]
              : []),
            ['session.updated', JSON.stringify(body)],
          ],
        },
        after: () => this.store.publishControl(id, 'params'),
      };
    });
  }

  async retry(tenant: string, id: string, body: z.infer<typeof retryBody>, ifMatch?: number) {
    return this.mutate(tenant, id, ifMatch, async (s) => {
      if (s.status === 'running')
        throw conflict('session_running', 'A turn is in progress; cancel it first or wait.');
      const records =
        s.iteration > 0 ? await this.store.iterationRecords(id, s.iteration - 1, s.iteration - 1) : [];
      const rec = records[0];
      if (!rec) throw conflict('nothing_to_retry', 'The session has no reply to retry.');
      const params = body?.params ? mergeParams(s.params, body.params) : s.params;
      const run = this.runOps(
        { ...s, status: 'idle' },
        { pending: null, params, iteration: s.iteration - 1, runStart: s.iteration - 1 },
      );
      return {
        ops: {
          ...run,
          trim_msgs: rec.reply_index,
          trim_iters: rec.iteration - 1,
          hincr: { params_rev: 1 },
          events: [
            ['turn.dropped', JSON.stringify({ iteration: rec.iteration, reason: 'retry' })],
            ...(body?.params
              ? [['params.updated', JSON.stringify({ params: body.params })] as [string, string]]
              : []),
            ...run.events!,
          ],
        },
        starts: true,
      };
    });
  }

  async cancel(tenant: string, id: string, ifMatch?: number): Promise<MutationResult> {
    const s = await this.store.loadFor(tenant, id);
    if (ifMatch !== undefined && s.revision !== ifMatch)
      throw new AppError(412, 'revision_mismatch', `The session is at revision ${s.revision}.`, {
        revision: s.revision,
      });
    if (s.status === 'idle' || s.status === 'failed') {
      throw conflict('session_not_running', `The session is ${s.status}; there is nothing to cancel.`);
    }
    if (s.status === 'requires_action' || !(await this.store.leaseHolder(id))) {
      try {
        await cancelSession(this.store, s, {});
        await this.store.unmarkDue(id);
      } catch (err) {
        if (!(err instanceof AppError && err.code === 'invalid_status')) throw err;
      }
      return { state: await this.store.loadFor(tenant, id), queued: false };
    }
    await this.store.apply(
      id,
      { status: ['running'] },
      { hset: { control: 'cancel' }, events: [['session.cancel_requested', '{}']] },
    );
    await this.store.publishControl(id, 'cancel');
    // The owner aborts the turn and commits the cancel; wait a bounded time so most callers see the result.
    for (let i = 0; i < 100; i++) {
      const cur = await this.store.loadFor(tenant, id);
      if (cur.status !== 'running') return { state: cur, queued: false };
      if (i > 20 && !(await this.store.leaseHolder(id))) {
        await cancelSession(this.store, cur, {}).catch(() => {});
      }
      await new Promise((r) => setTimeout(r, 30));
    }
    return { state: await this.store.loadFor(tenant, id), queued: true };
  }

  async resume(tenant: string, id: string, ifMatch?: number) {
    return this.mutate(tenant, id, ifMatch, async (s) => {
      if (s.status !== 'failed')
        throw conflict('session_not_failed', `The session is ${s.status}; only a failed session resumes.`);
      let pending = s.pending;
      if (pending) {
        // The failed step runs again: failed server results are dropped so those calls run anew.
        pending = structuredClone(pending);
        for (const c of pending.calls) {
          if (c.kind === 'server' && c.result?.is_error && c.approval !== 'denied') {
            delete c.result;
            delete c.reported;
            c.started = false;
          }
        }
      }
      return { ops: this.runOps(s, { pending, runStart: s.runStart }), starts: true };
    });
  }

  async fork(
    tenant: string,
    id: string,
    body: z.infer<typeof forkBody>,
    ifMatch?: number,
  ): Promise<SessionState> {
    const s = await this.store.loadFor(tenant, id);
    if (ifMatch !== undefined && s.revision !== ifMatch) throw revisionMismatch(s.revision);
    if (body.at_iteration > s.iteration) {
      throw new AppError(404, 'iteration_not_found', `The session has ${s.iteration} iterations.`, {
        iteration: s.iteration,
      });
    }
    const records = await this.store.iterationRecords(id, 0, Math.max(0, body.at_iteration - 1));
    let end: number;
    if (body.at_iteration === 0) end = records[0]?.reply_index ?? s.msgCount;
    else {
      const rec = records[body.at_iteration - 1]!;
      end = (rec.results_index ?? rec.reply_index) + 1;
    }
    const history = await this.store.history(id, 0, end - 1);
    const kept = records.slice(0, body.at_iteration);
    const now = Date.now();
    const forked: SessionState = {
      ...s,
      id: newSessionId(),
      status: 'idle',
      revision: 0,
      iteration: body.at_iteration,
      runStart: body.at_iteration,
      pending: null,
      stopReason: null,
      error: null,
      usage: emptyUsage(),
      metadata: forkMetadata(s.metadata, body.metadata, id, body.at_iteration),
      createdAt: now,
      updatedAt: now,
      fence: 0,
      msgCount: history.length,
      control: '',
    };
    await this.insert(forked, history, kept, { forked_from: id });
    return forked;
  }

  async remove(tenant: string, id: string, ifMatch?: number): Promise<void> {
    const s = await this.store.loadFor(tenant, id);
    if (ifMatch !== undefined && s.revision !== ifMatch) throw revisionMismatch(s.revision);
    if (s.status === 'running') await this.store.publishControl(id, 'delete');
    await this.store.destroy(id, tenant, s.createdAt);
  }

  /** The history the next turn sends (pending tool calls are answered first). */
  async messages(tenant: string, id: string) {
    await this.store.loadFor(tenant, id);
    const history = await this.store.history(id);
    return { data: history, pending_tool_calls: pendingToolCalls(history).map((c) => c.id) };
  }
}
