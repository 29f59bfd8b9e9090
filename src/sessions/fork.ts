/** `POST /v1/sessions/:id/fork`: a new idle session with a source's history up to one of its iteration records. */
import { createHash } from 'node:crypto';
import type { z } from 'zod';
import { NotFound, SessionExists, badRequest } from '../errors.js';
import { isAgentTool, type forkBody } from '../schemas.js';
import {
  newSessionId,
  recordCount,
  type IterationRecord,
  type SessionState,
} from '../store/session-state.js';
import { insertSession, noSpend } from './create.js';
import type { StoredMessage } from '../history.js';
import { toolsBeforeChanges } from './history-tools.js';
import { asDeclared, declaredTools } from './removed-tools.js';
import { checkIfMatch, type SessionDeps } from './mutate.js';

/** The id of the fork a keyed request makes (its idempotency token's, salted apart from a create's). */
export const keyedForkId = (token: string) =>
  `ses_${createHash('sha256').update(`fork:${token}`).digest('hex').slice(0, 24)}`;

/**
 * A new idle session with the history of `id` up to the end of iteration record `at_iteration` (record n, as
 * `GET …/iterations/:n` numbers them: turns and compactions in order; 0: before the first).
 */
export async function forkSession(
  deps: SessionDeps,
  tenant: string,
  id: string,
  body: z.infer<typeof forkBody>,
  ifMatch?: number,
): Promise<{ state: SessionState; replayed: boolean }> {
  const { store } = deps;
  // A keyed fork is named after its key (SessionDeps.applied; salted, so that the key of a create never names a
  // fork): a retry whose first request died between the write and its answer's record finds the fork it made.
  const keyedId = deps.applied !== undefined ? keyedForkId(deps.applied) : undefined;
  const made = async () => {
    const f = keyedId !== undefined ? await store.load(keyedId) : null;
    return f && f.tenant === tenant ? f : null;
  };
  const before = await made();
  if (before) return { state: before, replayed: true };
  const s = await store.loadFor(tenant, id);
  checkIfMatch(s, ifMatch);
  const count = recordCount(s);
  if (body.at_iteration > count) {
    throw new NotFound('iteration', `The session has ${count} iteration records.`, {
      iteration: s.iteration,
      records: count,
    });
  }
  // Records up to `replacedAt` address the history a `PUT …/messages` replaced: of them, only the last one (the
  // history as it is now, when no record came since) can be forked from.
  const total = s.msgBase + s.msgCount;
  const replaced = body.at_iteration <= s.replacedAt;
  if (replaced && body.at_iteration < count) {
    throw new NotFound(
      'iteration',
      `Iteration record ${body.at_iteration} belongs to a history replaced since (PUT …/messages); fork at ${count}.`,
      { replaced_at: s.replacedAt, records: count },
    );
  }
  const records = await store.iterationRecords(id, 0, Math.max(0, body.at_iteration - 1));
  const end = replaced ? total : forkEnd(records, body.at_iteration, total);
  // After a compaction the history starts with its summary: a fork takes the history as it stood at that point.
  const until = await store.historyUntil(id, s.msgBase, end);
  if (!until) {
    // A fork's records before the history it copied (docs/API.md: the messages a summary replaced are not copied).
    throw new NotFound(
      'iteration',
      `Iteration record ${body.at_iteration} addresses messages this session does not keep (it is a fork taken after them); fork its source.`,
      { iteration: s.iteration, records: count },
    );
  }
  const { messages: history, base } = until;
  const kept = records.slice(0, body.at_iteration);
  const toolsSent = await toolsSentAt(deps, s, end, total, history);
  // The fork's counts are those of the records it keeps: its model turns, and its compactions.
  const compactions = kept.filter((r) => r.kind === 'compaction').length;
  const turns = kept.length - compactions;
  // Redis's clock, as a create's (create.ts `newSessionState`).
  const now = store.clock.now();
  const forked: SessionState = {
    ...s,
    id: keyedId ?? newSessionId(),
    status: 'idle',
    revision: 0,
    iteration: turns,
    compactions,
    runStart: turns,
    pending: null,
    stopReason: null,
    error: null,
    ...noSpend(),
    metadata: forkMetadata(s.metadata, body.metadata, id, body.at_iteration),
    createdAt: now,
    updatedAt: now,
    fence: 0,
    msgCount: history.length,
    msgBase: base,
    compactRequest: null,
    control: '',
    // A fork's history is its own: its first run starts a new thread.
    thread: null,
    toolsSent,
    // A fork of a sub-agent's session answers no call of its parent: it is a session of its own.
    parent: null,
  };
  // Its own sub-agents' calls are watched as a created session's are (create.ts, src/agents/sweep.ts).
  if (forked.tools.some(isAgentTool)) await store.runs.trees.watch(forked.id, forked.tenant);
  try {
    await insertSession(deps, forked, history, kept, { forked_from: id });
  } catch (err) {
    // Made meanwhile by a request of the same key (one whose process stalled past its lease).
    const now = err instanceof SessionExists ? await made() : null;
    if (now) return { state: now, replayed: true };
    throw err;
  }
  return { state: forked, replayed: false };
}

/**
 * What the model was told of the tools at the fork's end: the source's `tools_sent` with the tool changes made after
 * that point (its `system` messages, in the history or in a kept segment; a summary's `tool_changes` only restate
 * those before it) undone. The fork's first run then tells the model the change to the fork's `tools`, as a run of
 * the source tells a PATCH. A tool those changes had removed comes back as the source declared it, or, a client tool
 * the source no longer declares, as the fork's history last added it (removed-tools.ts): never a bare name no tool
 * source knows, which the fork's runs would drop unseen, never telling its removal.
 */
async function toolsSentAt(
  deps: SessionDeps,
  s: SessionState,
  end: number,
  total: number,
  kept: readonly StoredMessage[],
): Promise<SessionState['toolsSent']> {
  if (s.toolsSent === null || end >= total) return s.toolsSent;
  const dropped = (await deps.store.messagesAt(s.id, s.msgBase, end, total - 1)).filter(
    (m) => m.role === 'system',
  );
  // An MCP toolset removed after the fork's end comes back as the source declared it (history-tools.ts `restored`).
  const before = toolsBeforeChanges(s.toolsSent, dropped, declaredTools(s));
  if (!before) return s.toolsSent;
  return asDeclared(deps, s, before, kept);
}

/**
 * How many messages of the session's whole record (segments, then history) a fork at iteration `at` keeps: through
 * that iteration's results (or reply); a skipped compaction added none, so it ends where the iteration before it did.
 */
function forkEnd(records: IterationRecord[], at: number, total: number): number {
  for (let n = at; n > 0; n--) {
    const rec = records[n - 1]!;
    if (rec.reply_index >= 0) return (rec.results_index ?? rec.reply_index) + 1;
  }
  // Iteration 0: what came before the first reply (a first compaction's summary stands after what it summarized).
  const first = records[0];
  return first && first.reply_index >= 0 ? first.reply_index : total;
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
