/**
 * B7 upstream bytes: what the service sends the Messages API per iteration — request bodies as the fake received them
 * — in a 50-iteration run (49 calculate_sum calls, then a text) of a session that already holds 10 or 1,000 messages
 * (B4's history, ~200 characters a message, `start: false`; a posted message starts the run). Each run's first request
 * is left out of the per-iteration figure and reported apart: it starts the SDK's message thread with the whole
 * history, because the thread is not kept across runs (docs/ARCHITECTURE.md, "Message threads upstream"). For
 * comparison, the same requests as they would be without a thread (the whole conversation each time, `thread: false`,
 * as the service sent before), computed from the conversation the fake saw.
 */
import type { Ctx, Profiled } from '../lib/context.js';
import type { FakeRecord } from '../lib/fake.js';
import { fmt, httpOk, mean, sleep } from '../lib/util.js';
import { follow, openWs, streamUrl, untilRunEnds } from '../lib/ws.js';
import { followRunEnd, verdict, type Verdict } from './common.js';
import { history } from './b4.js';

export interface B7Row {
  history: number;
  /** Bytes of the run's first request (a new thread: the whole history). */
  firstRequestBytes: number;
  /** Mean request bytes over the run's other requests. */
  bytesPerIteration: number;
  /** The same requests without a thread (the whole conversation, system and tools each time), mean bytes. */
  unthreadedBytesPerIteration: number;
  /** Requests of the run that continued a thread (of `iterations - 1`). */
  continued: number;
}

/** A chat: one text reply per posted message, each message a run of its own. */
export interface B7Chat {
  messages: number;
  /** Request bytes of the run of the 10th message, and of the last one. */
  after10: number;
  afterLast: number;
  /** Runs after the first that continued the session's thread. */
  continued: number;
}

export interface B7Result {
  iterations: number;
  rows: B7Row[];
  /** A chat of CHAT messages: bytes per run after CHAT vs after 10 (contract §7.5: ≤ 1.5×). */
  chat: B7Chat;
  chatRatio: number;
  /** bytesPerIteration after 1,000 messages / after 10. */
  ratio: number;
  /** The same ratio without threads. */
  unthreadedRatio: number;
  verdict: Verdict;
}

const ITER = 50;
const CHAT = 100;

/** A chat of CHAT messages, each a run: the request bytes of each run (a text reply, so one request a run). */
async function chat(ctx: Ctx, base: string): Promise<B7Chat> {
  const s = await httpOk('POST', `${base}/v1/sessions`, { start: false, messages: history(1) });
  const bytes: number[] = [];
  let continued = 0;
  // The id of the last event seen: each run is followed from there, so the replay of an earlier run's
  // running → idle cannot end the wait for this one.
  let lastId: string | undefined;
  for (let i = 0; i < CHAT; i++) {
    await ctx.fakeCtl.enqueue([
      { type: 'message', content: [{ type: 'text', text: `Answer number ${i}.` }] },
    ]);
    const since = (await ctx.fakeCtl.stats()).requests;
    // Subscribed (the socket open) before the message starts the run.
    const ws = await openWs(streamUrl(base, s.id, lastId), 60_000);
    const followed = follow(base, s.id, {
      ws,
      timeoutMs: 60_000,
      onEvent: untilRunEnds((ev) => (lastId = ev.id)),
    });
    await httpOk('POST', `${base}/v1/sessions/${s.id}/messages`, {
      text: `Chat message number ${i}, please.`,
    });
    await followed;
    const reqs = await ctx.fakeCtl.requests(since);
    bytes.push(reqs.reduce((n, r) => n + r.bytes, 0));
    if (i > 0 && reqs[0]?.body?.thread?.type === 'continue') continued++;
  }
  return { messages: CHAT, after10: bytes[9]!, afterLast: bytes[CHAT - 1]!, continued };
}

/** What a request would weigh without a thread: its body with the whole conversation, `system` and `tools`. */
function unthreadedBytes(r: FakeRecord): number {
  const { thread: _thread, ...body } = r.body as Record<string, unknown>;
  const tools = r.tools ?? [];
  return Buffer.byteLength(
    JSON.stringify({
      ...body,
      messages: r.messages,
      ...(r.system !== undefined ? { system: r.system } : {}),
      ...(tools.length ? { tools } : {}),
    }),
  );
}

async function run(ctx: Ctx, base: string, length: number): Promise<B7Row> {
  const s = await httpOk('POST', `${base}/v1/sessions`, {
    start: false,
    tools: ['calculate_sum'],
    messages: history(length),
    max_iterations: ITER,
  });
  await ctx.fakeCtl.enqueue([
    ...Array.from({ length: ITER - 1 }, (_, i) => ({
      type: 'message',
      content: [{ type: 'tool_use', name: 'calculate_sum', input: { a: i, b: 1 } }],
    })),
    { type: 'message', content: [{ type: 'text', text: 'All sums are done.' }] },
  ]);
  const since = (await ctx.fakeCtl.stats()).requests;
  const followed = followRunEnd(ctx, base, s.id, 120_000);
  await sleep(50); // subscribed before the run starts
  await httpOk('POST', `${base}/v1/sessions/${s.id}/messages`, { text: 'Add the numbers, please.' });
  await followed;
  const session = await httpOk('GET', `${base}/v1/sessions/${s.id}`);
  if (session.iteration !== ITER)
    throw new Error(`B7 session ran ${session.iteration} iterations, not ${ITER}`);
  const reqs = await ctx.fakeCtl.requests(since);
  if (reqs.length !== ITER) throw new Error(`B7 run sent ${reqs.length} requests, not ${ITER}`);
  const rest = reqs.slice(1);
  return {
    history: length,
    firstRequestBytes: reqs[0]!.bytes,
    bytesPerIteration: mean(rest.map((r) => r.bytes)),
    unthreadedBytesPerIteration: mean(rest.map(unthreadedBytes)),
    continued: rest.filter((r) => r.body?.thread?.type === 'continue').length,
  };
}

export async function b7(ctx: Ctx): Promise<B7Result> {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.pacing(0);
  await ctx.redis.admin.flushall();
  const svc = await ctx.service();
  const rows: B7Row[] = [];
  let chatRow: B7Chat | undefined;
  try {
    for (const length of [10, 1000]) rows.push(await run(ctx, svc.url, length));
    chatRow = await chat(ctx, svc.url);
  } finally {
    await svc.stop();
  }
  const ratio = rows[1]!.bytesPerIteration / rows[0]!.bytesPerIteration;
  const unthreadedRatio = rows[1]!.unthreadedBytesPerIteration / rows[0]!.unthreadedBytesPerIteration;
  if (!chatRow) throw new Error('B7 chat did not run');
  const chatRatio = chatRow.afterLast / chatRow.after10;
  return {
    iterations: ITER,
    rows,
    chat: chatRow,
    chatRatio,
    ratio,
    unthreadedRatio,
    verdict: verdict(ratio <= 1.5 && chatRatio <= 1.5),
  };
}

export async function b7Profile(ctx: Ctx, profiled: Profiled) {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.pacing(0);
  await profiled({}, async (svc) => {
    await run(ctx, svc.url, 1000);
  });
}

/** B7's section of docs/BENCHMARKS.md and its summary row (bench/report.ts). */
export function b7Report(b7: B7Result): { lines: string[]; summary: string } {
  const kB = (n: number) => `${fmt(n / 1024, 1)} kB`;
  const B = (n: number) => `${fmt(n, 0)} B`;
  const x = (n: number) => `${fmt(n, 2)}×`;
  const [small, large] = [b7.rows[0]!, b7.rows[1]!];
  return {
    lines: [
      `Bytes sent upstream (request bodies as the fake received them) per iteration of a ${b7.iterations}-iteration ` +
        'run (49 calculate_sum calls, then a text) of a session that already holds 10 or 1,000 messages (~200 ' +
        "characters each), each run's first request left out and shown apart. Within a run the service continues the " +
        "SDK's message thread, so a request carries what the history gained since the last reply. The last column is " +
        'the same requests as they would be without a thread (whole conversation, `system` and `tools` each time), as ' +
        'the service sent them before.',
      '',
      '| earlier messages | first request of the run | per iteration (others) | continued a thread | without a thread |',
      '|---:|---:|---:|---:|---:|',
      ...b7.rows.map(
        (r) =>
          `| ${fmt(r.history, 0)} | ${kB(r.firstRequestBytes)} | **${B(r.bytesPerIteration)}** | ` +
          `${r.continued} of ${b7.iterations - 1} | ${kB(r.unthreadedBytesPerIteration)} |`,
      ),
      '',
      `- Per iteration after 1,000 messages vs after 10: **${x(b7.ratio)}** (without threads ${x(b7.unthreadedRatio)}). ` +
        `Target: ≤ 1.5×. **${b7.verdict}**.`,
      `- The run's first request (${kB(large.firstRequestBytes)} after 1,000 messages, ${kB(small.firstRequestBytes)} ` +
        'after 10) starts a new thread here: these sessions were created with their history (`start: false`).',
      `- A chat of ${b7.chat.messages} messages, each a run: the session's thread is kept across runs (API.md §10.2), ` +
        `${b7.chat.continued} of ${b7.chat.messages - 1} runs continued it; bytes of the run after ` +
        `${b7.chat.messages} messages vs after 10: ${B(b7.chat.afterLast)} vs ${B(b7.chat.after10)}, ` +
        `**${x(b7.chatRatio)}** (target ≤ 1.5×).`,
      '',
    ],
    summary:
      `| B7 upstream bytes | ${B(large.bytesPerIteration)} vs ${B(small.bytesPerIteration)} per iteration after 1,000 vs 10 messages ` +
      `(without threads ${kB(large.unthreadedBytesPerIteration)} vs ${kB(small.unthreadedBytesPerIteration)}) | ≤ 1.5× | ${x(b7.ratio)} | ${b7.verdict} |`,
  };
}
