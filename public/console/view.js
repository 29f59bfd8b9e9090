// What the console shows, computed from what the API returns: no DOM here. A session's conversation is its
// persisted history (GET …/messages) plus the turn still streaming (its `stream.event`s); tool calls are paired with
// their results (from the history, the pending `required_action`, or `tool.*` events).

/** Event ids are `<ms>-<seq>`: compared as numbers, part by part (the client's `isAfter`, kept here so that this
 * module runs without the client's build, under Node in test/console/console-view.test.ts). */
function compareIds(a, b) {
  const [am, as] = a.split('-').map(Number);
  const [bm, bs] = b.split('-').map(Number);
  return am - bm || as - bs;
}

/** Events kept per open session (the service keeps about 10 000 per log). */
const MAX_EVENTS = 10_000;

/** The live state of one session, fed by its events. */
export class SessionModel {
  constructor(id) {
    this.id = id;
    this.session = null;
    this.history = [];
    /** Revision of the session fetched with `history` (the history is at least this recent). */
    this.historyRevision = -1;
    /** Model turns the history read holds (the session's `iteration` when it was read). */
    this.historyIteration = -1;
    /** tool_use_id → {decision, reason, by} from `tool_call.decided`. */
    this.decisions = new Map();
    /** Every event received, in order, each once. */
    this.events = [];
    this.eventIds = new Set();
    /** iteration → {iteration, messageCount, blocks, state: 'streaming'|'completed', completedRevision} */
    this.live = new Map();
    /** tool_use_id → {name, input, started, result?} from `tool.started` / `tool.completed`. */
    this.tools = new Map();
    this.errors = [];
    this.queued = [];
    /** `message.appended` events: user turns, shown until the history read holds them. */
    this.appended = [];
    this.lastAppendedRevision = -1;
    this.compactions = [];
    /** Iteration records (GET …/iterations), read with the history. */
    this.iterations = [];
    /** iteration → cost in dollars, from `turn.completed` (`data.usage.cost_usd`): turns not yet in a record read. */
    this.turnCosts = new Map();
    /**
     * The newest `session.status` event applied, `{revision, data}`. A snapshot read while the stream ran ahead of
     * it (its revision below this one's) shows this status, not its own older one (`withLatestStatus`).
     */
    this.latestStatus = null;
  }

  /**
   * Applies one event, once (a repeated or earlier id is ignored). An event more recent than the snapshot (its
   * revision higher) may change the status shown; older events (a replay) only fill in the log, turns and tool
   * timings. Returns whether the event was new.
   */
  apply(ev) {
    if (this.eventIds.has(ev.id)) return false;
    const prev = this.events.at(-1);
    if (prev && compareIds(ev.id, prev.id) <= 0) return false;
    this.eventIds.add(ev.id);
    this.events.push(ev);
    if (this.events.length > MAX_EVENTS) this.eventIds.delete(this.events.shift().id);
    const d = ev.data ?? {};
    switch (ev.type) {
      case 'turn.started':
        this.live.set(d.iteration, {
          iteration: d.iteration,
          messageCount: d.message_count,
          blocks: [],
          state: 'streaming',
          completedRevision: null,
          stopReason: null,
        });
        break;
      case 'stream.event':
        applyStreamEvent(this.liveTurn(d.iteration), d.event);
        break;
      case 'turn.completed': {
        const t = this.liveTurn(d.iteration);
        t.state = 'completed';
        // Null when the turn's reply is committed later, with its tool results (the events were written apart):
        // then the session's iteration count says when the history holds it (`inHistory`).
        t.completedRevision = ev.revision ?? null;
        if (Array.isArray(d.message?.content)) t.blocks = d.message.content.map((b) => ({ ...b }));
        t.stopReason = d.message?.stop_reason ?? null;
        if (typeof d.usage?.cost_usd === 'number') this.turnCosts.set(d.iteration, d.usage.cost_usd);
        break;
      }
      case 'turn.dropped':
        this.live.delete(d.iteration);
        break;
      case 'tool.started':
        this.tools.set(d.tool_use_id, { name: d.name, input: d.input, started: ev.at, result: null });
        break;
      case 'tool.completed':
        this.tools.set(d.tool_use_id, {
          name: d.name,
          input: d.input,
          started: this.tools.get(d.tool_use_id)?.started ?? null,
          result: { content: d.content, is_error: d.is_error, duration_ms: d.duration_ms },
        });
        break;
      case 'tool_call.decided':
        this.decisions.set(d.tool_use_id, {
          decision: d.decision,
          reason: d.reason ?? null,
          by: d.by ?? null,
          // An approval with an edited input: the call runs with it (the history read next holds it too).
          input: d.input,
        });
        break;
      case 'session.error':
        this.errors.push({ at: ev.at, ...d });
        break;
      case 'session.status':
        if (d.status !== 'running') {
          // A turn cut short (cancel, failure) never completes: its partial text is not in the history.
          for (const [it, t] of this.live) if (t.state === 'streaming') this.live.delete(it);
        }
        // A replay (`revision` at most the snapshot's) only fills in the log: the snapshot is fresher.
        if (typeof ev.revision === 'number' && ev.revision >= (this.latestStatus?.revision ?? -1))
          this.latestStatus = { revision: ev.revision, data: d };
        this.session = this.withLatestStatus(this.session);
        break;
      case 'message.queued':
        this.queued.push({ revision: ev.revision ?? 0, message: d.message, interrupt: d.interrupt });
        break;
      case 'message.appended':
        this.lastAppendedRevision = Math.max(this.lastAppendedRevision, ev.revision ?? 0);
        this.appended.push({ revision: ev.revision ?? 0, message: d.message ?? d });
        break;
      case 'compaction.completed':
      case 'compaction.skipped':
        this.compactions.push({ type: ev.type, at: ev.at, ...d });
        break;
      default:
        break;
    }
    return true;
  }

  liveTurn(iteration) {
    let t = this.live.get(iteration);
    if (!t) {
      t = {
        iteration,
        messageCount: null,
        blocks: [],
        state: 'streaming',
        completedRevision: null,
        stopReason: null,
      };
      this.live.set(iteration, t);
    }
    return t;
  }

  /**
   * A read of the session and its history, consistent with each other: the history is the one of the session's
   * revision (session.js reads the session again after the history, and again while the revision moved). Events
   * the stream delivered before this read returned may be newer than it: the latest status among them still shows.
   */
  setSnapshot(session, history) {
    this.history = history;
    this.historyRevision = session.revision;
    this.historyIteration = session.iteration ?? -1;
    this.session = this.withLatestStatus(session);
    // Turns the history now holds are shown from the history only.
    for (const [it, t] of this.live) if (this.inHistory(t)) this.live.delete(it);
  }

  /** `s` with the status of the newest `session.status` event, when that event is newer than the snapshot. */
  withLatestStatus(s) {
    const latest = this.latestStatus;
    if (!s || !latest || latest.revision <= this.historyRevision) return s;
    const d = latest.data;
    return {
      ...s,
      status: d.status,
      required_action: d.required_action,
      stop_reason: d.stop_reason,
      error: d.error,
    };
  }

  /** The iteration records, read with a snapshot (an array; anything else is ignored). */
  setIterations(records) {
    if (Array.isArray(records)) this.iterations = records;
  }

  /**
   * Whether the history read holds this turn's reply. A turn completed in a commit: that commit is at most the
   * history's revision. A turn whose events carry no revision — one still streaming (`turn.started`,
   * `stream.event`), or completed outside a commit (its reply committed later, with its results): the session read
   * had counted its iteration. (A replay delivers a turn's `turn.started` after a snapshot that already holds it;
   * shown live, it would be shown twice. A turn started again after a drop — retry, interrupt — has an iteration the
   * snapshot still counts only until the refresh that the drop's event, which has a revision, asks for.)
   */
  inHistory(t) {
    if (t.state === 'completed' && t.completedRevision !== null)
      return t.completedRevision <= this.historyRevision;
    return this.historyIteration >= t.iteration;
  }

  /** Turns to show after the history: streaming, or completed but not yet in the history we hold. */
  liveTurns() {
    return [...this.live.values()]
      .filter((t) => !this.inHistory(t))
      .sort((a, b) => a.iteration - b.iteration);
  }

  /** User turns merged since the history was read. */
  newUserTurns() {
    return this.appended.filter((a) => a.revision > this.historyRevision);
  }

  /** Follow-ups sent but not yet merged into the history. */
  pendingMessages() {
    return this.queued.filter(
      (q) => q.revision > this.lastAppendedRevision && q.revision > this.historyRevision,
    );
  }
}

/** Builds a block list from raw Messages API stream events, as the SDK's message stream does. */
function applyStreamEvent(turn, e) {
  if (!e || typeof e !== 'object') return;
  switch (e.type) {
    case 'message_start':
      turn.blocks = [];
      break;
    case 'content_block_start': {
      const b = { ...e.content_block };
      if (b.type === 'tool_use' || b.type === 'server_tool_use') b.partial_json = '';
      turn.blocks[e.index] = b;
      break;
    }
    case 'content_block_delta': {
      const b = turn.blocks[e.index];
      if (!b) break;
      const dl = e.delta ?? {};
      if (dl.type === 'text_delta') b.text = (b.text ?? '') + dl.text;
      else if (dl.type === 'thinking_delta') b.thinking = (b.thinking ?? '') + dl.thinking;
      else if (dl.type === 'input_json_delta') b.partial_json = (b.partial_json ?? '') + dl.partial_json;
      break;
    }
    case 'content_block_stop': {
      const b = turn.blocks[e.index];
      if (b && typeof b.partial_json === 'string' && b.partial_json) {
        try {
          b.input = JSON.parse(b.partial_json);
        } catch {
          /* shown as it came */
        }
      }
      break;
    }
    case 'message_delta':
      turn.stopReason = e.delta?.stop_reason ?? turn.stopReason;
      break;
    default:
      break;
  }
}

/** Text of a tool result's content (a string, or blocks). */
export function resultText(content) {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content.map((b) => (b.type === 'text' ? b.text : `[${b.type}]`)).join('\n');
  return JSON.stringify(content, null, 2);
}

/**
 * The conversation as a person reads it: `{kind: 'user'|'assistant', …}` items. Tool results are not items of their
 * own: each `tool_use` block carries `call` = {id, name, input, result, state}, where state is `done`, `denied`,
 * `running`, `awaiting_approval`, `awaiting_review` (a reply under review: `review_turn`), `awaiting_result`,
 * `under_review` (a result under review) or `pending`.
 */
export function conversation(model) {
  const s = model.session;
  const required = s?.required_action ?? null;
  const results = new Map();
  for (const m of model.history) {
    if (m.role === 'user' && Array.isArray(m.content))
      for (const b of m.content)
        if (b.type === 'tool_result')
          results.set(b.tool_use_id, { content: b.content, is_error: b.is_error === true });
  }
  const waiting = new Map((required?.tool_calls ?? []).map((c) => [c.id, c]));
  const reviewed = new Map((required?.tool_results ?? []).map((r) => [r.tool_use_id, r]));

  const call = (b) => {
    const id = b.id;
    const inHistory = results.get(id);
    const pendingResult = reviewed.get(id);
    const ev = model.tools.get(id);
    const denied = model.decisions.get(id)?.decision === 'deny';
    let state = 'pending';
    let result = inHistory ?? null;
    if (inHistory) state = 'done';
    else if (waiting.has(id))
      // A reply under review (`review_turn`): its calls wait for the review's `continue`; they take no decision or
      // result (409) and a sub-agent's has no child until then.
      state =
        required.type === 'approve_tool_calls'
          ? 'awaiting_approval'
          : required.type === 'review_turn'
            ? 'awaiting_review'
            : 'awaiting_result';
    else if (pendingResult) {
      result = { content: pendingResult.content, is_error: pendingResult.is_error === true };
      state = required.type === 'review_tool_results' ? 'under_review' : 'done';
    } else if (ev?.result) {
      result = ev.result;
      state = 'done';
    } else if (ev) state = 'running';
    // A denied call is answered with its reason as an error: shown as denied, unless its result is under review.
    if (denied && state !== 'under_review') state = 'denied';
    return {
      id,
      name: b.name,
      // The input the call runs with: the edited one of its approval (or of its tool events) may be newer than the
      // history read, whose tool_use block still has the model's.
      input: waiting.get(id)?.input ?? model.decisions.get(id)?.input ?? ev?.input ?? b.input,
      result,
      state,
      duration: ev?.result?.duration_ms,
    };
  };

  const figures = turnFigures(model);
  const items = [];
  let turn = 0;
  for (const [index, m] of model.history.entries()) {
    const blocks = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content;
    if (m.role === 'user') {
      const shown = blocks.filter((b) => b.type !== 'tool_result');
      if (shown.length) items.push({ kind: 'user', blocks: shown });
    } else {
      turn++;
      items.push({
        kind: 'assistant',
        turn,
        live: false,
        figures: figures.byIndex.get(index) ?? null,
        blocks: blocks.map((b) => (b.type === 'tool_use' ? { ...b, call: call(b) } : b)),
      });
    }
  }
  for (const a of model.newUserTurns()) {
    const c = a.message?.content;
    const blocks = typeof c === 'string' ? [{ type: 'text', text: c }] : (c ?? []);
    const shown = blocks.filter((b) => b.type !== 'tool_result');
    if (shown.length) items.push({ kind: 'user', blocks: shown });
  }
  for (const t of model.liveTurns()) {
    items.push({
      kind: 'assistant',
      turn: t.iteration,
      live: t.state === 'streaming',
      figures: figures.byIteration.get(t.iteration) ?? null,
      blocks: t.blocks.filter(Boolean).map((b) => (b.type === 'tool_use' ? { ...b, call: call(b) } : b)),
    });
  }
  for (const q of model.pendingMessages()) {
    const c = q.message?.content;
    items.push({
      kind: 'user',
      queued: true,
      interrupt: q.interrupt,
      blocks: typeof c === 'string' ? [{ type: 'text', text: c }] : (c ?? []),
    });
  }
  return items;
}

/** Whether `POST …/continue` can answer 2xx now (docs/API.md: `continue`), so the button is enabled only then. */
export function canContinue(s) {
  if (!s) return false;
  if (s.status === 'requires_action') return s.required_action?.type === 'review_tool_results';
  return s.status === 'idle' && (s.stop_reason === 'max_iterations' || s.stop_reason === 'budget_exhausted');
}

/**
 * Time and cost of each turn, from the iteration records: `byIndex` (index in the history read → figures) and
 * `byIteration` (iteration → figures, with the cost of `turn.completed` for a turn no record read holds yet). A
 * record's `reply_index` counts the compacted segments too: the history starts at the latest summary's index.
 * Figures: `{ms, cost}` — `ms` the upstream time (`timings.upstream_ms`, else completed_at − started_at), `cost`
 * `usage.cost_usd`; either may be null.
 */
export function turnFigures(model) {
  const records = model.iterations ?? [];
  let offset = 0;
  for (const r of records) if (r.kind === 'compaction' && r.reply_index >= 0) offset = r.reply_index;
  const byIndex = new Map();
  const byIteration = new Map();
  for (const r of records) {
    const f = { ms: recordMs(r), cost: typeof r.usage?.cost_usd === 'number' ? r.usage.cost_usd : null };
    // A compaction's `iteration` is the turn's before it (it is no model turn): only turns are keyed by it.
    if (r.kind !== 'compaction') byIteration.set(r.iteration, f);
    if (typeof r.reply_index === 'number' && r.reply_index >= offset) byIndex.set(r.reply_index - offset, f);
  }
  for (const [it, cost] of model.turnCosts ?? [])
    if (!byIteration.has(it)) byIteration.set(it, { ms: null, cost });
  return { byIndex, byIteration };
}

function recordMs(r) {
  if (typeof r.timings?.upstream_ms === 'number') return r.timings.upstream_ms;
  const ms = Date.parse(r.completed_at) - Date.parse(r.started_at);
  return Number.isFinite(ms) ? ms : null;
}

/** "1.2 s · $0.0042" for a turn's figures ("" without any). */
export function formatFigures(f) {
  if (!f) return '';
  const parts = [];
  if (typeof f.ms === 'number') parts.push(f.ms < 1000 ? `${f.ms} ms` : `${(f.ms / 1000).toFixed(1)} s`);
  if (typeof f.cost === 'number') parts.push(formatCost(f.cost));
  return parts.join(' · ');
}

/** Whether `POST …/compact` can answer 202 now: idle, failed or running, and no compaction pending already. */
export function canCompact(s) {
  if (!s || s.compaction_pending === true) return false;
  return s.status === 'idle' || s.status === 'failed' || s.status === 'running';
}

/**
 * The session search box: `key=value` is the server's metadata filter (`?metadata.<key>=<value>`: the key 1–64
 * characters without `=` or spaces, the value at most 512); anything else filters the page loaded by id, title and
 * metadata (`{text}`, lower-cased); empty is null.
 */
export function parseSearch(query) {
  const q = (query ?? '').trim();
  if (!q) return null;
  const m = /^([^=\s]{1,64})=([^]{0,512})$/.exec(q);
  if (m && m[2].trim()) return { metadata: { key: m[1], value: m[2].trim() } };
  return { text: q.toLowerCase() };
}

/** Whether a listed session matches a text search: its id, its title, a metadata key or value. */
export function matchesSearch(session, text, history = []) {
  if (!text) return true;
  const meta = Object.entries(session?.metadata ?? {}).map(
    ([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`,
  );
  return [session?.id ?? '', sessionTitle(session, history) ?? '', ...meta].some((x) =>
    x.toLowerCase().includes(text),
  );
}

/** A session's title: `metadata.title`, else the first user text of its history (cut to 80 chars), else null. */
export function sessionTitle(session, history = []) {
  const t = session?.metadata?.title;
  if (typeof t === 'string' && t.trim()) return t.trim().slice(0, 80);
  for (const m of history) {
    if (m.role !== 'user') continue;
    const text =
      typeof m.content === 'string' ? m.content : m.content?.find?.((b) => b.type === 'text')?.text;
    if (typeof text === 'string' && text.trim()) {
      const one = text.trim().replace(/\s+/g, ' ');
      return one.length > 80 ? `${one.slice(0, 79)}…` : one;
    }
  }
  return null;
}

/**
 * A session's cost as the server counts it (`usage.cost_usd`: list prices of the model's family, MODEL_PRICES over
 * them; null when the model has no price), or null.
 */
export function sessionCost(session) {
  const c = session?.usage?.cost_usd;
  return typeof c === 'number' ? c : null;
}

export function formatCost(dollars) {
  if (dollars === null || dollars === undefined) return '—';
  return dollars < 0.01 ? `$${dollars.toFixed(4)}` : `$${dollars.toFixed(2)}`;
}

export function totalTokens(u) {
  if (!u) return 0;
  return (
    u.input_tokens + u.output_tokens + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0)
  );
}

/** "12 s ago", "3 min ago", or the date. */
export function ago(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString();
}

/** One line describing an event for the raw panel. */
export function eventSummary(ev) {
  const d = ev.data ?? {};
  switch (ev.type) {
    case 'session.status':
      return [d.status, d.required_action?.type, d.stop_reason, d.error?.code].filter(Boolean).join(' · ');
    case 'stream.event': {
      const e = d.event ?? {};
      const delta = e.delta?.text ?? e.delta?.thinking ?? e.delta?.partial_json;
      return `${d.iteration} ${e.type}${delta ? ` ${JSON.stringify(delta)}` : ''}`;
    }
    case 'turn.started':
    case 'turn.completed':
    case 'iteration.persisted':
    case 'turn.dropped':
      return `iteration ${d.iteration}${d.reason ? ` (${d.reason})` : ''}`;
    case 'tool.started':
    case 'tool.completed':
      return `${d.name} ${d.tool_use_id}${d.is_error ? ' error' : ''}`;
    case 'tool_call.decided':
      return `${d.decision} ${d.tool_use_id}`;
    case 'session.error':
      return `${d.code}: ${d.message}`;
    default:
      return '';
  }
}
