/** The fake Messages API's control routes (`/_fake/*`, test/fake/server.ts) and what the bench reads from them. */
import { httpOk } from './util.js';

export interface FakeRecord {
  body: any;
  messages: any[];
  system?: unknown;
  tools?: unknown[];
  /** Request body bytes as the fake received them. */
  bytes: number;
  at: number;
  status?: number;
}

export class FakeControl {
  constructor(readonly url: string) {}

  reset = () => httpOk('POST', `${this.url}/_fake/reset`, {});
  pacing = (eventDelayMs: number) => httpOk('POST', `${this.url}/_fake/pacing`, { eventDelayMs });
  script = (script: string) => httpOk('POST', `${this.url}/_fake/script`, { script });
  enqueue = (replies: unknown[]) => httpOk('POST', `${this.url}/_fake/enqueue`, replies);
  stats = () => httpOk('GET', `${this.url}/_fake/stats`) as Promise<{ requests: number; queued: number }>;

  /** Recorded requests from index `since` on (the fake keeps them until the next reset). */
  async requests(since = 0): Promise<FakeRecord[]> {
    return (await httpOk(
      'GET',
      `${this.url}/_fake/requests?since=${since}`,
      undefined,
      120_000,
    )) as FakeRecord[];
  }
}

/** The text of a conversation's first user message: the bench tags each run with it. */
export function conversationTag(rec: FakeRecord): string {
  const first = rec.messages?.[0] ?? rec.body?.messages?.[0];
  const c = first?.content;
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.find((b: any) => b?.type === 'text')?.text ?? '';
  return '';
}

/**
 * Per tag starting with `prefix`: the request arrival times at the fake, in order. The gap between two requests of a
 * conversation is one iteration as the upstream sees it: its own streaming time plus everything the client did
 * between the end of one reply and sending the next request.
 */
export function arrivalsByTag(records: FakeRecord[], prefix: string): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const r of records) {
    const tag = conversationTag(r);
    if (!tag.startsWith(prefix)) continue;
    const list = out.get(tag) ?? [];
    list.push(r.at);
    out.set(tag, list);
  }
  for (const list of out.values()) list.sort((a, b) => a - b);
  return out;
}

export function intervals(arrivals: Map<string, number[]>): number[] {
  const out: number[] = [];
  for (const list of arrivals.values())
    for (let i = 1; i < list.length; i++) out.push(list[i]! - list[i - 1]!);
  return out;
}

/** A reply of one text block whose deltas carry their index: chunk k of the stream is `#k x y ` (3 words). */
export function indexedText(chunks: number): string {
  const words: string[] = [];
  for (let k = 0; k < chunks; k++) words.push(`#${k}`, 'x', 'y');
  return words.join(' ');
}

/** Index of a delta produced by `indexedText`, or -1. */
export function chunkIndex(text: string): number {
  const m = /#(\d+)/.exec(text);
  return m ? Number(m[1]) : -1;
}
