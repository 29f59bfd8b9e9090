/**
 * Shared pieces of the durability tests (not a test file itself): a scripted tool-loop model for the fake upstream
 * that remembers every reply it sent, and the checks of a session's history against what the model sent.
 */
import { Redis } from 'ioredis';
import { checkHistory, type StoredMessage } from '../../src/history.js';
import { text, toolCall, type FakeHandler, type FakeReply, type FakeRequest } from '../fake/server.js';

export interface SentReply {
  tag: string;
  /** The turn it answered: the number of assistant messages in the conversation the model saw. */
  turn: number;
  /** The tool_use id, or the text of a final reply. */
  key: string;
  /** Cut mid-stream (`cutAfterEvents`): the client never received it whole; it must never land in a history. */
  cut: boolean;
  at: number;
}

export interface LoopOptions {
  /** Model turns per run: `turns - 1` tool calls, then a final text (a number, or one per session tag). */
  turns: number | ((tag: string) => number);
  /** The tool call of turn `t` (default `calculate_sum {a: t + 1, b: 1}`). */
  call?: (tag: string, turn: number) => { name: string; input: unknown };
  /** Replaces the reply of a request: an error to inject, a cut, or null for the normal reply. */
  fault?: (tag: string, turn: number, req: FakeRequest) => FakeReply | 'cut' | null;
  /** Reply options (pacing) of every normal reply. */
  eventDelayMs?: number;
}

/** Every session's first user message carries `[s:<tag>]`, so the model knows which session it answers. */
export const tagged = (tag: string, textBody = 'Run the loop.') => `[s:${tag}] ${textBody}`;

export function tagOf(req: FakeRequest): string | null {
  const first = JSON.stringify(req.messages[0] ?? '');
  return /\[s:([A-Za-z0-9_-]+)\]/.exec(first)?.[1] ?? null;
}

/**
 * A deterministic tool-loop model: turn t of session `tag` calls a tool with a unique tool_use id
 * `toolu_<tag>_<t>_<n>`, the last turn answers `done <tag> #<n>`. It records what it sent, per session.
 */
export class LoopModel {
  readonly sent: SentReply[] = [];
  /** Requests per session tag, in arrival order. */
  readonly requests = new Map<string, FakeRequest[]>();
  private seq = 0;

  constructor(readonly opts: LoopOptions) {}

  readonly handler: FakeHandler = (req) => {
    const tag = tagOf(req) ?? 'untagged';
    const turn = req.messages.filter((m) => m?.role === 'assistant').length;
    const list = this.requests.get(tag) ?? [];
    list.push(req);
    this.requests.set(tag, list);
    const fault = this.opts.fault?.(tag, turn, req) ?? null;
    if (fault && fault !== 'cut') return fault;
    const n = ++this.seq;
    const pace = this.opts.eventDelayMs !== undefined ? { eventDelayMs: this.opts.eventDelayMs } : {};
    const cut = fault === 'cut' ? { cutAfterEvents: 3 } : {};
    if (turn >= this.turnsOf(tag) - 1) {
      const key = `done ${tag} #${n}`;
      this.sent.push({ tag, turn, key, cut: fault === 'cut', at: Date.now() });
      return text(key, { ...pace, ...cut });
    }
    const { name, input } = this.opts.call?.(tag, turn) ?? {
      name: 'calculate_sum',
      input: { a: turn + 1, b: 1 },
    };
    const key = `toolu_${tag}_${turn}_${n}`;
    this.sent.push({ tag, turn, key, cut: fault === 'cut', at: Date.now() });
    return toolCall(name, input, { id: key, ...pace, ...cut });
  };

  turnsOf(tag: string): number {
    return typeof this.opts.turns === 'number' ? this.opts.turns : this.opts.turns(tag);
  }

  /** Requests the model received for `tag` since `since` (ms epoch). */
  requestsOf(tag: string, since = 0): FakeRequest[] {
    return (this.requests.get(tag) ?? []).filter((r) => r.at >= since);
  }
}

export interface HistoryVerdict {
  problems: string[];
  /** Assistant turns beyond the one expected per model turn (a turn persisted twice). */
  duplicated: number;
}

/** Keys (tool_use id or final text) of an assistant message. */
function keyOf(m: StoredMessage): string | null {
  if (m.role !== 'assistant' || typeof m.content === 'string') return null;
  const use = m.content.find((b) => b.type === 'tool_use');
  if (use) return String(use.id);
  const t = m.content.find((b) => b.type === 'text');
  return t ? String(t.text) : null;
}

/**
 * Checks a finished tool-loop session: the Messages API's rules (roles alternate, each tool_use answered exactly once,
 * results right after their call), exactly one assistant message per model turn, each one a reply the model sent
 * whole (never a cut one), in turn order, ending with the final text.
 */
export function verifyLoopHistory(
  history: StoredMessage[],
  model: LoopModel,
  tag: string,
  opts: { turns?: number; result?: (turn: number, block: Record<string, any>) => string | null } = {},
): HistoryVerdict {
  const turns = opts.turns ?? model.turnsOf(tag);
  const problems = checkHistory(history).map((p) => `#${p.index}: ${p.message}`);
  const byKey = new Map(model.sent.filter((s) => s.tag === tag).map((s) => [s.key, s]));
  const assistants = history.filter((m) => m.role === 'assistant');
  const seen = new Set<string>();
  let duplicated = 0;
  const turnsSeen = new Map<number, number>();
  assistants.forEach((m, i) => {
    const key = keyOf(m);
    const sent = key ? byKey.get(key) : undefined;
    if (!key || !sent) {
      problems.push(`assistant #${i} is no reply the model sent: ${JSON.stringify(m).slice(0, 200)}`);
      return;
    }
    if (sent.cut) problems.push(`assistant #${i} is a reply that was cut mid-stream (${key})`);
    if (seen.has(key)) problems.push(`assistant #${i} (${key}) appears twice`);
    seen.add(key);
    turnsSeen.set(sent.turn, (turnsSeen.get(sent.turn) ?? 0) + 1);
    if (sent.turn !== i) problems.push(`assistant #${i} answered turn ${sent.turn}`);
  });
  for (const count of turnsSeen.values()) if (count > 1) duplicated += count - 1;
  if (assistants.length !== turns) {
    problems.push(`expected ${turns} assistant turns, found ${assistants.length}`);
  }
  const last = history.at(-1);
  if (!last || last.role !== 'assistant' || !String(keyOf(last)).startsWith(`done ${tag}`)) {
    problems.push(`the history does not end with the final reply: ${JSON.stringify(last).slice(0, 200)}`);
  }
  if (opts.result) {
    history.forEach((m, i) => {
      if (m.role !== 'user' || typeof m.content === 'string') return;
      for (const b of m.content) {
        if (b.type !== 'tool_result') continue;
        const turn = assistants.findIndex((a) => keyOf(a) === b.tool_use_id);
        const why = opts.result!(turn, b);
        if (why) problems.push(`#${i} result of ${b.tool_use_id}: ${why}`);
      }
    });
  }
  return { problems, duplicated };
}

/**
 * Messages of an earlier snapshot of a history that the final history does not hold at the same place: a persisted
 * message that was lost (or rewritten). Tool loops never edit their history, so a snapshot must be a prefix.
 */
export function lostSince(snapshot: StoredMessage[], final: StoredMessage[]): number {
  let lost = 0;
  snapshot.forEach((m, i) => {
    if (JSON.stringify(final[i]) !== JSON.stringify(m)) lost++;
  });
  return lost;
}

/** A direct Redis client for assertions (the session's keys, the run lease). */
export function redisClient(url: string): Redis {
  const r = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: false });
  r.on('error', () => {});
  return r;
}

/** The pid of the process holding the session's run lease (owner ids are `<host>-<pid>-<hex>:<fence>`), or null. */
export async function leaseOwnerPid(redis: Redis, id: string): Promise<number | null> {
  const v = await redis.get(`s:{${id}}:l`);
  const m = v ? /-(\d+)-[0-9a-f]+:\d+$/.exec(v) : null;
  return m ? Number(m[1]) : null;
}

/** The persisted history, read from Redis directly (works while every service process is down). */
export async function storedHistory(redis: Redis, id: string): Promise<StoredMessage[]> {
  return (await redis.lrange(`s:{${id}}:m`, 0, -1)).map((m) => JSON.parse(m) as StoredMessage);
}

/** Polls `fn` until it returns a truthy value; throws after `timeoutMs`. */
export async function until<T>(
  fn: () => T | Promise<T>,
  timeoutMs: number,
  what = 'condition',
  everyMs = 25,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let lastErr: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      lastErr = err;
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}${lastErr ? `: ${(lastErr as Error).message}` : ''}`,
  );
}

/**
 * Creates a `calculate_sum` loop session tagged `tag` through `api`, driven by `model`, and waits until the model
 * has been asked `turns` times for it. Returns the session id.
 */
export async function startLoop(
  api: { post: (path: string, body: unknown) => Promise<{ body: any }> },
  model: LoopModel,
  tag: string,
  turns = 2,
): Promise<string> {
  const created = await api.post('/v1/sessions', { input: tagged(tag), tools: ['calculate_sum'] });
  const id = created.body.id as string;
  await until(() => model.requestsOf(tag).length === turns, 20_000, `turn ${turns}`);
  return id;
}
