/**
 * B2 concurrency: N sessions × 5 iterations at once (20 ms of upstream streaming per turn), each created over REST
 * and followed over its WebSocket, against N concurrent in-process SDK runners (bench/inproc.ts, its own process).
 */
import { InprocWorker, type Ctx } from '../lib/context.js';
import { arrivalsByTag, intervals } from '../lib/fake.js';
import { RssSampler, redisInfo } from '../lib/procs.js';
import { median, nowMs, percentile, pool } from '../lib/util.js';
import { createAndFollow, verdict, type Verdict } from './common.js';

export interface B2Result {
  sessions: number;
  iterations: number;
  svc: Side & { redisUsedBytes: number; redisPeakBytes: number; redisBefore: number };
  sdk: Side;
  baselineIterMs: number;
  throughputRatio: number;
  verdict: Verdict;
}

interface Side {
  seconds: number;
  itersPerSec: number;
  iterMs: { p50: number; p99: number };
  overheadMs: { p50: number; p99: number };
  rss: { start: number; peak: number; end: number };
  errors: number;
}

const ITER = 5;

/** Ends when every session's run has ended; the service side of B2. */
export async function serviceConcurrent(ctx: Ctx, base: string, n: number, prefix: string, timeoutMs: number) {
  const t0 = nowMs();
  let errors = 0;
  const ends = await pool(
    Array.from({ length: n }, (_, i) => i),
    n,
    async (i) => {
      try {
        const r = await createAndFollow(
          ctx,
          base,
          { tools: ['calculate_sum'], input: `${prefix}${i}`, max_iterations: 10 },
          timeoutMs,
        );
        return r.t1;
      } catch (err) {
        if (errors++ < 3) ctx.log(`  B2 session ${i}: ${String(err).slice(0, 200)}`);
        return NaN;
      }
    },
  );
  const t1 = Math.max(...ends.filter(Number.isFinite));
  return { t0, t1, errors };
}

export async function b2(ctx: Ctx): Promise<B2Result> {
  const n = ctx.quick ? 200 : 1000;
  const timeoutMs = ctx.quick ? 60_000 : 180_000;
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.script(`tool-loop:${ITER}`);
  await ctx.fakeCtl.pacing(ctx.turnEventDelayMs);
  await ctx.redis.admin.flushall();

  // The in-process baseline of one iteration at this pacing, unloaded (from B1, or measured here).
  let baseline = ctx.baselineIterationMs;
  let worker = await InprocWorker.start(ctx.fake.url);
  if (baseline === undefined) {
    for (let i = 0; i < 5; i++) await worker.run(1, `b2-cal-${i}-`, 10, 30_000);
    baseline = median(intervals(arrivalsByTag(await ctx.fakeCtl.requests(0), 'b2-cal-')));
  }
  await worker.stop();

  // The service.
  const svc = await ctx.service();
  const redisBefore = Number((await redisInfo(ctx.redis.admin, 'memory')).used_memory);
  let redisPeak = redisBefore;
  const redisTimer = setInterval(() => {
    redisInfo(ctx.redis.admin, 'memory').then(
      (m) => (redisPeak = Math.max(redisPeak, Number(m.used_memory))),
      () => {},
    );
  }, 250);
  const svcRss = new RssSampler(svc.pid);
  let svcRun;
  try {
    svcRun = await serviceConcurrent(ctx, svc.url, n, 'b2-svc-', timeoutMs);
  } finally {
    clearInterval(redisTimer);
  }
  const svcMem = svcRss.stop();
  const redisMem = await redisInfo(ctx.redis.admin, 'memory');
  await svc.stop();

  // The in-process runners, in a fresh worker process.
  worker = await InprocWorker.start(ctx.fake.url);
  const sdkRss = new RssSampler(worker.pid);
  const sdkRun = await worker.run(n, 'b2-sdk-', 10, timeoutMs);
  const sdkMem = sdkRss.stop();
  await worker.stop();

  const records = await ctx.fakeCtl.requests(0);
  const side = (prefix: string, t0: number, t1: number, errors: number, rss: Side['rss']): Side => {
    const arr = arrivalsByTag(records, prefix);
    let iterations = 0;
    for (const list of arr.values()) iterations += list.length;
    const iv = intervals(arr);
    const over = iv.map((v) => v - baseline!);
    const seconds = (t1 - t0) / 1000;
    return {
      seconds,
      itersPerSec: iterations / seconds,
      iterMs: { p50: median(iv), p99: percentile(iv, 99) },
      overheadMs: { p50: median(over), p99: percentile(over, 99) },
      rss,
      errors: errors + Math.max(0, n * ITER - iterations) / ITER,
    };
  };
  const svcSide = side('b2-svc-', svcRun.t0, svcRun.t1, svcRun.errors, svcMem);
  const sdkSide = side('b2-sdk-', sdkRun.t0, sdkRun.t1, sdkRun.errorCount, sdkMem);
  const ratio = svcSide.itersPerSec / sdkSide.itersPerSec;
  return {
    sessions: n,
    iterations: ITER,
    svc: {
      ...svcSide,
      redisUsedBytes: Number(redisMem.used_memory),
      redisPeakBytes: Math.max(redisPeak, Number(redisMem.used_memory)),
      redisBefore,
    },
    sdk: sdkSide,
    baselineIterMs: baseline,
    throughputRatio: ratio,
    verdict: verdict(ratio >= 0.8 && svcSide.overheadMs.p99 <= 20 && svcSide.errors === 0),
  };
}

export async function b2Profile(ctx: Ctx, dir: string) {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.script(`tool-loop:${ITER}`);
  await ctx.fakeCtl.pacing(ctx.turnEventDelayMs);
  await ctx.redis.admin.flushall();
  const svc = await ctx.service({}, dir);
  try {
    await serviceConcurrent(ctx, svc.url, ctx.quick ? 200 : 1000, 'b2-prof-', 180_000);
  } finally {
    await svc.stop();
  }
}
