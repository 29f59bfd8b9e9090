/**
 * The sub-agent trees and schedules of the chaos test (not a test file itself): a scripted model for two-level
 * trees (root → researcher → fetcher, the fetcher calls the non-idempotent `sleep`), and the checks of what the
 * store holds once the chaos is over: every tree complete with one child per call, every fire of a schedule one
 * session, no tool call run twice.
 */
import type { Redis } from 'ioredis';
import { checkHistory, type StoredMessage } from '../../src/history.js';
import { text, toolCall, type FakeReply, type FakeRequest } from '../fake/server.js';
import { storedHistory, tagOf } from './chaos-lib.js';

const ROLES = ['root', 'researcher', 'fetcher'] as const;
type Role = (typeof ROLES)[number];
const marker = (role: Role) => `chaos-tree:${role}`;

/** The effective system prompt (a thread's `continue` request carries none: the fake keeps it). */
const systemOf = (req: FakeRequest) => JSON.stringify(req.system ?? '');

/** The root's `tools`: an agent whose session has an agent of its own (two levels below the root). */
export const treeTools = () => [
  {
    type: 'agent',
    name: 'researcher',
    description: 'Researches, with its fetcher.',
    session: {
      system: marker('researcher'),
      tools: [
        {
          type: 'agent',
          name: 'fetcher',
          description: 'Fetches.',
          session: { system: marker('fetcher'), tools: ['sleep'] },
        },
      ],
    },
  },
];
export const treeRootSystem = marker('root');

/** The text of a tool_result block's content. */
const resultText = (content: unknown) =>
  typeof content === 'string'
    ? content
    : ((content as Array<{ text?: string }> | undefined) ?? []).map((c) => c.text ?? '').join('');

/**
 * The model of the trees' sessions: each level calls the one below once (its prompt carries the next tag,
 * `[s:<tag>r]`, `[s:<tag>f]`), then answers `<role> <tag>: <the result it got>`; the fetcher sleeps 300 ms.
 */
export class TreeModel {
  private seq = 0;

  static roleOf(req: FakeRequest): Role | null {
    const sys = systemOf(req);
    return ROLES.find((r) => sys.includes(marker(r))) ?? null;
  }

  readonly handler = (req: FakeRequest): FakeReply => {
    const role = TreeModel.roleOf(req)!;
    const tag = tagOf(req) ?? 'untagged';
    const last = req.messages.at(-1);
    const blocks = Array.isArray(last?.content) ? last.content : [];
    const result = blocks.find((b) => b.type === 'tool_result');
    const pace = { eventDelayMs: 60 };
    if (result && result.type === 'tool_result')
      return text(`${role} ${tag}: ${result.is_error ? 'ERROR ' : ''}${resultText(result.content)}`, pace);
    const id = `toolu_${tag}_${++this.seq}`;
    if (role === 'root') return toolCall('researcher', { prompt: `[s:${tag}r] Research.` }, { id, ...pace });
    if (role === 'researcher')
      return toolCall('fetcher', { prompt: `[s:${tag.slice(0, -1)}f] Fetch.` }, { id, ...pace });
    return toolCall('sleep', { ms: 300, label: tag }, { id, ...pace });
  };
}

/** One session's stored fields, as the checks need them. */
interface Stored {
  id: string;
  status: string | undefined;
  parent: { session_id: string; tool_use_id: string } | null;
  metadata: Record<string, unknown>;
}

/** Every session the store holds (its meta hashes `s:{ses_…}`; schedules' hashes are `s:{sch_…}`). */
export async function storedSessions(r: Redis): Promise<Stored[]> {
  const out: Stored[] = [];
  for (const k of await r.keys('s:{ses_*}')) {
    if (!/^s:\{[^}]+\}$/.test(k)) continue;
    const [status, parent, metadata] = await r.hmget(k, 'status', 'parent', 'metadata');
    out.push({
      id: k.slice(3, -1),
      status: status ?? undefined,
      parent: parent ? (JSON.parse(parent) as Stored['parent']) : null,
      metadata: metadata ? (JSON.parse(metadata) as Record<string, unknown>) : {},
    });
  }
  return out;
}

/** Roles and block types of a history, for a problem's message. */
const summary = (h: StoredMessage[]) =>
  h
    .map((m) =>
      typeof m.content === 'string'
        ? `${m.role}:text`
        : `${m.role}:${m.content.map((b) => (b.type === 'text' ? `text(${String(b.text).slice(0, 40)})` : b.type)).join('+')}`,
    )
    .join(' | ');

const finalText = (h: StoredMessage[]) => {
  const m = h.at(-1);
  if (!m || m.role !== 'assistant') return '';
  return typeof m.content === 'string'
    ? m.content
    : m.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('');
};

/**
 * Checks a tree rooted at `rootId` (tag `tag`): the root, its one child and that child's one child are idle with
 * valid histories of two assistant turns each, and the root's final text carries the chain of results (the
 * fetcher's `sleep` answered, possibly "interrupted" by a crash, never failed). Returns the problems.
 */
export async function verifyTree(
  r: Redis,
  all: Stored[],
  rootId: string,
  tag: string,
): Promise<{ problems: string[]; sleepCalls: string[] }> {
  const problems: string[] = [];
  const sleepCalls: string[] = [];
  const levels = [rootId];
  for (let depth = 0; depth < 2; depth++) {
    const kids = all.filter((s) => s.parent?.session_id === levels[depth]);
    if (kids.length !== 1) problems.push(`${tag}: level ${depth} has ${kids.length} children (expected 1)`);
    if (kids[0]) levels.push(kids[0].id);
  }
  for (const [depth, id] of levels.entries()) {
    const s = all.find((x) => x.id === id);
    if (s?.status !== 'idle') problems.push(`${tag}: level ${depth} is ${s?.status}`);
    const h = await storedHistory(r, id);
    problems.push(...checkHistory(h).map((p) => `${tag}: level ${depth} #${p.index}: ${p.message}`));
    const turns = h.filter((m) => m.role === 'assistant').length;
    if (turns !== 2)
      problems.push(
        `${tag}: level ${depth} (${id}) has ${turns} assistant turns (expected 2): ${summary(h)}`,
      );
    if (depth === 2)
      for (const m of h)
        if (m.role === 'assistant' && typeof m.content !== 'string')
          for (const b of m.content) if (b.type === 'tool_use') sleepCalls.push(String(b.id));
  }
  const want = new RegExp(
    `^root ${tag}: researcher ${tag}r: fetcher ${tag}f: (slept 300 ms|ERROR .*interrupted)`,
  );
  const got = finalText(await storedHistory(r, rootId));
  if (!want.test(got)) problems.push(`${tag}: the root's final text is ${JSON.stringify(got.slice(0, 200))}`);
  return { problems, sleepCalls };
}

/**
 * Checks a schedule once it stopped firing: exactly one session per fire (`fires` of its hash = sessions naming
 * it = its runs list), each for a different `scheduled_for`, all idle. Returns the problems and the session ids.
 */
export async function verifySchedule(
  r: Redis,
  all: Stored[],
  scheduleId: string,
): Promise<{ problems: string[]; sessions: string[]; fires: number; skips: number }> {
  const problems: string[] = [];
  const [firesRaw, skipsRaw] = await r.hmget(`s:{${scheduleId}}`, 'fires', 'skips');
  const fires = Number(firesRaw ?? 0);
  const mine = all.filter((s) => s.metadata['schedule_id'] === scheduleId);
  const runs = await r.zcard(`s:{${scheduleId}}:runs`).catch(() => -1);
  if (mine.length !== fires) problems.push(`${scheduleId}: ${mine.length} sessions for ${fires} fires`);
  if (runs >= 0 && runs !== fires) problems.push(`${scheduleId}: ${runs} runs listed for ${fires} fires`);
  const times = new Set(mine.map((s) => String(s.metadata['scheduled_for'])));
  if (times.size !== mine.length) problems.push(`${scheduleId}: two sessions for one scheduled_for`);
  for (const s of mine)
    if (s.status !== 'idle') problems.push(`${scheduleId}: session ${s.id} is ${s.status}`);
  return { problems, sessions: mine.map((s) => s.id), fires, skips: Number(skipsRaw ?? 0) };
}
