/**
 * The pending tool step as stored, and the one format of a tool result from where it is made to the model.
 *
 * A result is encoded once, as the text of its `tool_result` block (`encodeResult`), by whoever makes it: the route
 * for a client's result or a reviewer's replacement, the engine for a server tool's. It is written once:
 * - into the meta field `result:<tool_use_id>` when the step must wait (a client result, a decision, a review), from
 *   where the `apply` script moves it, as it is, into the results turn (the engine names the call, it does not send
 *   the bytes again: lua/includes/blocks.lua `blocks_results`);
 * - or, when nothing waits, straight into the results turn.
 * The `pending` field holds the step without its results; the `result:*` fields live exactly as long as the step
 * (`apply` drops them when it clears `pending`).
 *
 * Whether a call's `tool.completed` was written is a field of its own too, `reported:<tool_use_id>` ('1'), dropped
 * with the step: a tenant tool's result is delivered (and announced) by whichever replica has it while the run that
 * parked for it may be rewriting the step from an older read, and a flag inside the `pending` JSON would be lost by
 * that rewrite (the run would announce the call again). A writer leaves the fields of calls it does not know the
 * outcome of alone (src/engine/tool-tasks.ts), as it leaves their results.
 */
import type { StoredBlock } from '../history.js';
import { decodeStored } from './decode.js';

export interface ToolResult {
  content: string | StoredBlock[];
  is_error: boolean;
}

/** One call of the assistant turn that the history ends with, while the service works out its results. */
export interface PendingCall {
  id: string;
  name: string;
  input: unknown;
  kind: 'server' | 'client';
  /** `required` waits for a decision; `auto` needs none. */
  approval: 'auto' | 'required' | 'approved' | 'denied';
  reason?: string;
  /** Set once the call's result is known (ran, denied, submitted, replaced): through `setResult`. */
  result?: ToolResult;
  /**
   * Never stored: `result` is the one in the store (read from its `result:<id>` field), so writing the step again
   * leaves it be, and the commit of the results turn names it instead of sending it.
   */
  resultStored?: boolean;
  /**
   * Never stored: `result`'s `tool_result` block as made once for its write (`text`), or only its size (`bytes`) as
   * read from its `result:<id>` field. The step's bound (`resultsBytes`) and its write (`pendingFields`) take them
   * from here: encoding a result again is a JSON.stringify of up to MAX_TURN_BYTES on the event loop (~40 ms for
   * 4 MB), and a client's result submitted to a step counted every other result of it that way (twice when over the
   * bound). Dropped with the result (`setResult`, `clearResult`).
   */
  encoded?: { bytes: number; text?: EncodedResult };
  /** A server tool that has started: after a crash it runs again only if idempotent. */
  started?: boolean;
  /** Its `tool.completed` event was written. Stored in its own field (`reportedField`), never in the step's JSON. */
  reported?: boolean;
  /** A tenant tool's call: a tool task answers it (src/tenant-tools/), not the service. */
  runner?: 'worker' | 'http';
  /** Times a failed tenant-tool call was given back to be run anew (resume): each round is a task of its own. */
  round?: number;
}

export interface PendingStep {
  calls: PendingCall[];
  /** Results wait for review before the model sees them. */
  review: boolean;
  /** The iteration (model turn) these calls belong to. */
  iteration: number;
  /**
   * The number of that turn's iteration record (`GET …/iterations/:n`). Absent in steps stored before records had
   * numbers apart from `iteration`: then it is `iteration`.
   */
  record?: number;
  /** Policy `pause_after_turn`: the reply (the history's last message) waits for review before its calls run. */
  turn?: { content: unknown; stop_reason: string | null } | undefined;
}

/**
 * The calls of the step a tool task answers and that have no result yet (src/engine/tool-tasks.ts): their tasks may
 * be out, so a run's write of the step from an older read leaves their fields alone (`pendingFields`' `tasksOut`).
 */
export function outstandingTasks(step: PendingStep): PendingCall[] {
  return step.calls.filter(
    (c) => c.runner && !c.result && c.approval !== 'required' && c.approval !== 'denied',
  );
}

/** The text of one `tool_result` block, made only by `encodeResult`. */
export type EncodedResult = string & { readonly __encoded: 'tool_result' };

/** The meta field that holds a pending call's result. */
export const resultField = (toolUseId: string) => `result:${toolUseId}`;

/** The meta field that says a pending call's `tool.completed` was written ('1'). */
export const reportedField = (toolUseId: string) => `reported:${toolUseId}`;

/**
 * A result as its `tool_result` block, and as the `{tool_use_id, content, is_error}` data of the event that tells of
 * it: the content (up to MAX_TURN_BYTES) is encoded once for both.
 */
export function encodeResult(toolUseId: string, r: ToolResult): { block: EncodedResult; event: string } {
  const id = JSON.stringify(toolUseId);
  const content = JSON.stringify(r.content);
  // The block's keys in the order the SDK writes them; `is_error` only when true, as the SDK does.
  const block = `{"type":"tool_result","tool_use_id":${id},"content":${content}${r.is_error ? ',"is_error":true' : ''}}`;
  return {
    // The one place a block text is named as such: built from JSON texts above.
    block: block as EncodedResult,
    event: `{"tool_use_id":${id},"content":${content},"is_error":${r.is_error}}`,
  };
}

/**
 * What an `is_error` result without content says instead: the Messages API refuses such a block ("content cannot be
 * empty if `is_error` is true"), and one in the history would fail every later turn of the session.
 */
const NO_ERROR_DETAILS = 'Error: the tool gave no details.';

/**
 * Gives a call its result (a new one, or a replacement): it is written with the step's next write. An error result
 * without content (an MCP server's, an HTTP tool's, a chat's empty `errorText`: the routes refuse a client's) gets
 * `NO_ERROR_DETAILS`. Returns the result as set, the one to announce.
 */
export function setResult(call: PendingCall, result: ToolResult): ToolResult {
  call.result =
    result.is_error && result.content.length === 0 ? { ...result, content: NO_ERROR_DETAILS } : result;
  delete call.resultStored;
  delete call.encoded;
  return call.result;
}

/**
 * `setResult`, the result encoded once: its block kept on the call (`encoded`, for the step's bound and its write)
 * and returned with its event's data.
 */
export function setEncodedResult(
  call: PendingCall,
  result: ToolResult,
): { block: EncodedResult; event: string } {
  const encoded = encodeResult(call.id, setResult(call, result));
  call.encoded = { bytes: Buffer.byteLength(encoded.block), text: encoded.block };
  return encoded;
}

/**
 * Bytes of a call's result as stored and sent: its `tool_result` block (the `result:<id>` field's length), as known
 * (`encoded`) or encoded now.
 */
const blockBytes = (c: Pick<PendingCall, 'id' | 'result' | 'encoded'>): number =>
  c.result ? (c.encoded?.bytes ?? Buffer.byteLength(encodeResult(c.id, c.result).block)) : 0;

/**
 * Bytes of the results turn a step's results form: their `tool_result` blocks together, as apply-8.lua's
 * `results_max` guard sums the `result:*` fields (MAX_TURN_BYTES bounds it, as it bounds the turn follow-ups form).
 */
export function resultsBytes(calls: ReadonlyArray<Pick<PendingCall, 'id' | 'result' | 'encoded'>>): number {
  return calls.reduce((n, c) => n + blockBytes(c), 0);
}

/**
 * Holds a step's results (its `calls`) to `max` bytes together (MAX_TURN_BYTES) where the service took them from tools itself
 * (server, MCP, tenant tools' calls, a sub-agent's answer: `taken`): each one, in the step's order, that would take
 * the step's results past `max` is replaced by an `is_error` saying so, as a result over TOOL_RESULT_MAX_BYTES is. The
 * other results (a client's, refused at the write instead: 413) count as they stand. Returns the calls replaced.
 *
 * Every result of a step is sent again in each `session.status` event's `required_action.tool_results` and joined
 * into one turn by a script: unbounded, 40 results of 900 kB made 19 MB events and stalled Redis for every tenant.
 */
export function fitResults(
  calls: readonly PendingCall[],
  taken: ReadonlySet<string>,
  max: number,
): PendingCall[] {
  let total = resultsBytes(calls.filter((c) => !taken.has(c.id)));
  const replaced: PendingCall[] = [];
  for (const c of calls) {
    if (!taken.has(c.id) || !c.result) continue;
    const bytes = blockBytes(c);
    if (total + bytes > max) {
      setResult(c, {
        content: `Error: the result of ${c.name} is ${bytes} bytes; with the step's other results it would make ${total + bytes} bytes, more than the ${max} the tool results of one step may have together (MAX_TURN_BYTES)`,
        is_error: true,
      });
      replaced.push(c);
    }
    total += blockBytes(c);
  }
  return replaced;
}

/** Takes a call's result away (a failed server call that runs again): its field is emptied with the next write. */
export function clearResult(call: PendingCall): void {
  delete call.result;
  delete call.resultStored;
  delete call.encoded;
}

/**
 * Meta fields for `step` (null: none): `pending` (the step without results nor `reported` flags), each result not
 * yet stored — `''` for a call without one, so a result taken away is gone from the store too — and the `reported`
 * flags: `'1'` for a call announced, `''` for a call without a result (its result taken away, to be announced anew).
 * A call with a result not announced yet writes no flag: whoever announces it sets it, and no write undoes that.
 *
 * `tasksOut`: calls whose tool task is out (src/engine/tool-tasks.ts). A writer that is not guarded by the revision
 * (a run's fenced commit) does not know their outcome: the task's result may have been delivered (and announced)
 * since it read the step, so their result and `reported` fields are left as they are stored.
 */
export function pendingFields(
  step: PendingStep | null,
  tasksOut: ReadonlyArray<Pick<PendingCall, 'id'>> = [],
): Record<string, string> {
  if (!step) return { pending: '' };
  const out: Record<string, string> = {
    pending: JSON.stringify({
      ...step,
      calls: step.calls.map(({ result: _r, resultStored: _s, reported: _p, encoded: _e, ...call }) => call),
    }),
  };
  const unknown = new Set(tasksOut.map((c) => c.id));
  for (const c of step.calls) {
    if (unknown.has(c.id)) continue;
    if (c.reported) out[reportedField(c.id)] = '1';
    else if (!c.result) out[reportedField(c.id)] = '';
    if (c.resultStored) continue;
    out[resultField(c.id)] = c.result ? (c.encoded?.text ?? encodeResult(c.id, c.result).block) : '';
  }
  return out;
}

/** Marks the step's results as stored, once a write of `pendingFields(step)` landed. */
export function markStored(step: PendingStep): void {
  for (const c of step.calls) if (c.result) c.resultStored = true;
}

/**
 * The stored step with its results and `reported` flags read back from their fields. A step written before results
 * had fields of their own carries them inline: they stay, as not stored, and are written to their fields with the
 * step's next write.
 */
export function decodePending(h: Record<string, string>): PendingStep | null {
  const text = h['pending'];
  if (!text) return null;
  let step: PendingStep;
  try {
    step = decodeStored<PendingStep>(text);
  } catch {
    return null;
  }
  for (const c of step.calls) {
    // A step stored before the flags had fields of their own carries them in its JSON: they stay, and go to their
    // fields with the step's next write.
    if (h[reportedField(c.id)] === '1') c.reported = true;
    const stored = h[resultField(c.id)];
    if (!stored) continue;
    const b = decodeStored<{ content: ToolResult['content']; is_error?: boolean }>(stored);
    c.result = { content: b.content, is_error: b.is_error === true };
    c.resultStored = true;
    // Its size as stored, which the bound counts (apply-8.lua sums the fields): measured, not encoded again.
    c.encoded = { bytes: Buffer.byteLength(stored) };
  }
  return step;
}

/**
 * The results turn of `calls`, in their order, as `apply`'s `queue.results`: a call whose result is stored is
 * named (`[id]`), the others carry their block (`missing` for a call without a result).
 */
export function resultsTurn(
  calls: ReadonlyArray<Pick<PendingCall, 'id' | 'result' | 'resultStored'>>,
  missing: () => ToolResult,
): ResultsEntry[] {
  return calls.map((c) =>
    c.resultStored && c.result ? [c.id] : [c.id, encodeResult(c.id, c.result ?? missing()).block],
  );
}

/** One result of a results turn: a stored result named by its call, or its block. */
export type ResultsEntry = [string] | [string, EncodedResult];
