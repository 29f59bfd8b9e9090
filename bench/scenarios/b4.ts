/**
 * B4 persistence cost: Redis bytes written per iteration (`INFO stats` total_net_input_bytes, and the AOF's growth)
 * for a 6-iteration run (5 calculate_sum calls, then a text) of a session that already holds 10, 100 or 1,000
 * messages (created with `messages`, ~200 characters each, `start: false`; a posted message starts the run).
 */
import type { Ctx, Profiled } from '../lib/context.js';
import { redisInfo } from '../lib/procs.js';
import { httpOk, mean, sleep } from '../lib/util.js';
import { followRunEnd, verdict, type Verdict } from './common.js';

export interface B4Row {
  history: number;
  sessions: number;
  inputBytesPerIter: number;
  aofBytesPerIter: number;
  outputBytesPerRun: number;
  commandsPerIter: number;
}

export interface B4Result {
  iterations: number;
  rows: B4Row[];
  ratio: number;
  aofRatio: number;
  verdict: Verdict;
}

const TOOL_CALLS = 5;
const ITER = TOOL_CALLS + 1;

export function history(n: number): Array<{ role: 'user' | 'assistant'; content: string }> {
  const filler = 'The quick brown fox jumps over the lazy dog while the benchmark keeps counting. ';
  return Array.from({ length: n }, (_, i) => ({
    role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
    content: `${i}: ${filler.repeat(2)}${filler.slice(0, 30)}`,
  }));
}

async function counters(ctx: Ctx) {
  const [stats, pers, cmd] = await Promise.all([
    redisInfo(ctx.redis.admin, 'stats'),
    redisInfo(ctx.redis.admin, 'persistence'),
    redisInfo(ctx.redis.admin, 'commandstats'),
  ]);
  let calls = 0;
  for (const [k, v] of Object.entries(cmd)) {
    if (k.startsWith('cmdstat_')) calls += Number(/calls=(\d+)/.exec(v)?.[1] ?? 0);
  }
  return {
    input: Number(stats['total_net_input_bytes']),
    output: Number(stats['total_net_output_bytes']),
    aof: Number(pers['aof_current_size']),
    calls,
  };
}

export async function runWithHistory(ctx: Ctx, base: string, length: number) {
  const s = await httpOk('POST', `${base}/v1/sessions`, {
    start: false,
    tools: ['calculate_sum'],
    messages: history(length),
    max_iterations: 10,
  });
  await ctx.fakeCtl.enqueue([
    ...Array.from({ length: TOOL_CALLS }, (_, i) => ({
      type: 'message',
      content: [{ type: 'tool_use', name: 'calculate_sum', input: { a: i, b: 1 } }],
    })),
    { type: 'message', content: [{ type: 'text', text: 'All sums are done.' }] },
  ]);
  await sleep(100); // the AOF buffer is written in the event loop after each command batch (appendfsync everysec)
  const before = await counters(ctx);
  const { followRun } = await startFollow(ctx, base, s.id);
  await httpOk('POST', `${base}/v1/sessions/${s.id}/messages`, { text: 'Add the numbers, please.' });
  await followRun;
  await sleep(100);
  const after = await counters(ctx);
  const session = await httpOk('GET', `${base}/v1/sessions/${s.id}`);
  if (session.iteration !== ITER)
    throw new Error(`B4 session ran ${session.iteration} iterations, not ${ITER}`);
  return {
    input: after.input - before.input,
    output: after.output - before.output,
    aof: after.aof - before.aof,
    // The counters' own INFO calls (3 before, 3 after) are not the service's.
    calls: after.calls - before.calls - 3,
  };
}

/** Subscribes before the run starts, so no event is missed; resolves when the run ends. */
async function startFollow(ctx: Ctx, base: string, id: string) {
  const followRun = followRunEnd(ctx, base, id, 60_000);
  await sleep(50);
  return { followRun };
}

export async function b4(ctx: Ctx): Promise<B4Result> {
  const perLength = ctx.quick ? 1 : 3;
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.pacing(0);
  await ctx.redis.admin.flushall();
  await ctx.redis.admin.config('RESETSTAT');
  const svc = await ctx.service();
  const rows: B4Row[] = [];
  try {
    await runWithHistory(ctx, svc.url, 10); // warm-up
    for (const length of [10, 100, 1000]) {
      const runs = [];
      for (let i = 0; i < perLength; i++) runs.push(await runWithHistory(ctx, svc.url, length));
      rows.push({
        history: length,
        sessions: perLength,
        inputBytesPerIter: mean(runs.map((r) => r.input)) / ITER,
        aofBytesPerIter: mean(runs.map((r) => r.aof)) / ITER,
        outputBytesPerRun: mean(runs.map((r) => r.output)),
        commandsPerIter: mean(runs.map((r) => r.calls)) / ITER,
      });
    }
  } finally {
    await svc.stop();
  }
  const ratio = rows[2]!.inputBytesPerIter / rows[0]!.inputBytesPerIter;
  const aofRatio = rows[2]!.aofBytesPerIter / rows[0]!.aofBytesPerIter;
  return { iterations: ITER, rows, ratio, aofRatio, verdict: verdict(ratio <= 1.5 && aofRatio <= 1.5) };
}

export async function b4Profile(ctx: Ctx, profiled: Profiled) {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.pacing(0);
  await profiled({}, async (svc) => {
    for (let i = 0; i < 3; i++) await runWithHistory(ctx, svc.url, 1000);
  });
}
