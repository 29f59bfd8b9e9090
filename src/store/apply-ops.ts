/**
 * The change one `apply` makes (lua/apply-8.lua): its ops, guard and result, and the one encoder of a turn's
 * content blocks.
 */
import type { StoredBlock } from '../history.js';
import type { ResultsEntry } from './pending.js';
import type { AppliedEntry, PostedEntry, SessionState, Status } from './session-state.js';

/**
 * A turn's content as it travels from where it comes from to the model: the JSON text of a content-block array,
 * made only by `encodeBlocks` (once, where the blocks come from: a follow-up at its route, tool results in the
 * engine), written once into the history by `apply`, joined there as text and never re-encoded on the way.
 */
export type EncodedBlocks = string & { readonly __encoded: 'blocks' };

export const encodeBlocks = (blocks: readonly StoredBlock[]): EncodedBlocks =>
  JSON.stringify(blocks) as EncodedBlocks;

/**
 * How many of the newest kept segments' byte lengths a session's meta hash keeps (`seg_bytes`, written with each
 * compaction): as many as a chat page reads at most (src/chat/record.ts SEGMENTS), so it knows a segment's size
 * before it reads it, and the one below them, whose `u|a` flag names the answer after the summary a page's read
 * ends at when it has read all it may (a compaction at a run's start, then 16 more in the run).
 */
export const SEGMENT_SIZES_KEPT = 17;

/** Ops of one `apply` (see lua/apply-8.lua); values already encoded. */
export interface ApplyOps {
  /**
   * Applied first: the first `count` messages become a kept segment, `summary` (message JSON) their stand-in; the
   * meta hash keeps the byte lengths of the newest `sizes` segments (`seg_bytes`: SEGMENT_SIZES_KEPT), with whether
   * each ends with a user turn (`ends_with_user`: engine/compaction.ts endsWithUserTurn of the messages moved).
   * `messages`: the moved messages' JSON as stored, which the store takes out: a segment of more than
   * STAGE_MIN_BYTES is built from them and appended in parts to a key of its own before the write (`staged`, set by
   * the store: that key's random suffix and the segment's byte length), else the script builds it as before.
   */
  compact?: {
    count: number;
    at_iteration: number;
    summary: string;
    sizes: number;
    ends_with_user?: boolean;
    messages?: readonly string[];
    staged?: { key: string; bytes: number };
  };
  trim_msgs?: number;
  lset_msgs?: Array<[number, string]>;
  push_msgs?: string[];
  /** Set by the store for a create whose `push_msgs` it staged in parts (Store `stageHistory`): their count. */
  stage?: { count: number };
  trim_iters?: number;
  lset_iters?: Array<[number, string]>;
  push_iters?: string[];
  hset?: Record<string, string>;
  hincr?: Record<string, number>;
  /**
   * Counters added once per mark (`[field, increments]`): applied only if the meta field `field` is not set yet, and
   * it is set with them. A sub-agent's usage joins its parent under `cb:<child id>`, whoever counts it first (the
   * agents' sweep counts under the same mark: lua/child-usage-1.lua), without the two writes' having to see each
   * other (that count moves no revision, so a revision guard does not order them).
   */
  count_once?: Array<[string, Record<string, number>]>;
  /** Follow-ups queued for the next user turn (the store adds the MAX_TURN_BYTES guard). */
  queue_push?: EncodedBlocks[];
  release_lease?: boolean;
  /**
   * A change no client sees but by its events (the deadline's warning, `action.expiring`): the revision and
   * `updated_at` stay, and its events carry no revision. Not with `queue`. Guard it by `fields` (a `rev` guard does
   * not tell two such changes apart: neither moves it).
   */
  keep_revision?: boolean;
  /**
   * The turn this change bills (its `hincr.u_*`) is not in its tenant's day yet: `<day>|<counters>` (src/cost/spend.ts
   * `openSpendTail`), appended to the meta field `spend_open` (a list, oldest first, at most SPEND_OPEN_MAX) after the
   * new revision, the turn's seq (OpenSpend). Never with `keep_revision`, which moves no revision.
   */
  spend_open?: string;
  /**
   * With `spend_open`: the seq through which the run recorded the session's turns in their tenant's day (RunHandle
   * `spendRecorded`); the entries of `spend_open` at or below it are dropped, the later ones (turns whose record
   * failed) kept. Absent: the run recorded none, every entry is kept.
   */
  spend_recorded?: number;
  /**
   * With a `create` guard: the create's time (ms), which its answer and `session.created` give as `updated_at`; the
   * write stamps it instead of Redis's TIME (apply-8.lua), so a read at the create's revision answers the same.
   */
  now?: number;
  /** `[type, data]`, or `[type, data, 'rev']` to have `"revision":null` in data replaced by the new revision. */
  events?: Array<[string, string] | [string, string, 'rev']>;
  /**
   * Pops the queued follow-ups into one user turn after `base`, or after the tool results `results` (in their order:
   * a stored result named, see store/pending.ts; `cache_last` marks the last one as a prompt-cache breakpoint).
   */
  queue?: {
    base?: EncodedBlocks;
    results?: ResultsEntry[];
    cache_last?: boolean;
    into_last?: boolean;
    none?: ApplyOps;
  };
}

export interface Guard {
  fence?: number;
  rev?: number;
  status?: Status[];
  /** Meta fields and the values they must hold ('' for unset), else 412 revision_mismatch (the state read changed). */
  fields?: Record<string, string>;
  create?: boolean;
  /** Bytes the user turn that queued follow-ups form may reach (set by the store from its options). */
  turn_max?: number;
  /**
   * Bytes the step's tool results (its `result:<id>` fields) may reach with this change's `hset`: set by the store
   * from MAX_TURN_BYTES for a client's results (`resultsCap`); a change that grows them past it is refused (413).
   */
  results_max?: number;
  /**
   * Bytes the tenant may still store once this change's counted additions are (set by the store for a client's write
   * under TENANT_MAX_BYTES): a change whose rewritten fields and history elements would grow by more is refused (429
   * `storage_bytes`), weighed in the script that writes them (storage-quota.ts).
   */
  room?: number;
  /** The chat's user message this change posts: refused (AlreadyPosted) if the session was given it lately. */
  posted?: PostedGuard;
  /**
   * The Idempotency-Key token of the request making the change (`t`; `q`: it queued work): refused (AlreadyApplied)
   * if the session recorded it already, else recorded with the change, the newest `keep` kept (includes/recent.lua).
   * `after`, `message`: recorded with it, see AppliedEntry.
   */
  applied?: { t: string; q: boolean; keep: number; after?: string; message?: string };
}

/** A chat's user message as a post records it (lua/includes/recent.lua): its UIMessage id and what was posted. */
export interface PostedGuard {
  id: string;
  /** The fingerprint of what is posted: the same id with other content is an edit. */
  fp: string;
  /** The event cursor the answer streams from. */
  after: string;
  /** How many of the newest posts the session remembers. */
  keep: number;
}

/**
 * A change refused because the session was given its chat message lately (guard `posted`): `entry` says how. Not a
 * refusal of the request: the chat route answers from the entry (src/chat/request.ts).
 */
export class AlreadyPosted extends Error {
  constructor(readonly entry: PostedEntry) {
    super(`the chat message ${entry.id} was posted already`);
  }
}

/**
 * A keyed request's change the session made already (guard `applied`): its process died before the answer was kept.
 * Not a refusal: the mutation answers from the session as it is (src/sessions/mutate.ts).
 */
export class AlreadyApplied extends Error {
  constructor(readonly entry: AppliedEntry) {
    super(`the change of token ${entry.t} was applied already`);
  }
}

export interface ApplyResult {
  revision: number;
  mergedCount: number;
  /** The blocks the change added to the history as a user turn (tool results, follow-ups), or null. */
  appended: StoredBlock[] | null;
  /** `appended` joined the last user turn rather than making a new one. */
  intoLast: boolean;
  control: SessionState['control'];
  paramsRev: number;
}

export function setsRunning(ops: ApplyOps | undefined): boolean {
  return !!ops && (ops.hset?.['status'] === 'running' || setsRunning(ops.queue?.none));
}

/** The event types an `apply` may write (a superset: a queue merge may or may not happen). */
export function opsEventTypes(ops: ApplyOps | undefined, out: string[] = []): string[] {
  if (!ops) return out;
  for (const ev of ops.events ?? []) out.push(ev[0]);
  if (ops.queue) {
    out.push('message.appended');
    opsEventTypes(ops.queue.none, out);
  }
  return out;
}
