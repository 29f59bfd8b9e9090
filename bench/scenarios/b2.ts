/**
 * B2 concurrency: N sessions × 5 iterations at once (20 ms of upstream streaming per turn), each created over REST
 * and followed over its WebSocket, against N concurrent in-process SDK runners (bench/inproc.ts, its own process).
 */
import { InprocWorker, type Ctx, type Profiled } from '../lib/context.js';
import { arrivalsByTag, intervals } from '../lib/fake.js';
import { RssSampler, cpuMeter, redisInfo } from '../lib/procs.js';
import { median, nowMs, percentile, pool, sleep } from '../lib/util.js';
import { createAndFollow, postWithRetry, verdict, type RetryCount, type Verdict } from './common.js';

export interface B2Result {
  sessions: number;
  iterations: number;
  rounds: number;
  svc: Side & { redisUsedBytes: number; redisPeakBytes: number; retries: RetryCount };
  sdk: Side;
  baselineIterMs: number;
  /** Median over the rounds of service/in-process iterations per second (each round measures both sides). */
  throughputRatio: number;
  ratios: number[];
  /** CPU ms per iteration of each process (median over the rounds): the service side, the in-process side. */
  cpuPerIter: { svc: Record<string, number>; sdk: Record<string, number> };
  /**
   * The same load on the service with nobody following (each round, between its two sides): what the 1,000
   * WebSocket followers cost, as throughput ratio to the in-process runners and as CPU per iteration.
   */
  bare: {
    itersPerSec: number;
    ratio: number;
    ratios: number[];
    cpuPerIter: Record<string, number>;
    errors: number;
  };
  /** One more service run with MAX_ACTIVE_RUNS set: admission control's effect on the turn overhead. */
  capped: {
    maxActiveRuns: number;
    seconds: number;
    itersPerSec: number;
    overheadMs: { p50: number; p99: number };
    errors: number;
  };
  verdict: Verdict;
}

/** MAX_ACTIVE_RUNS of the capped run: about what this 2-core machine drives at 20 ms turns without queueing. */
const CAP = 48;

/** The service side alone with MAX_ACTIVE_RUNS=CAP: runs beyond it wait before their first turn. */
async function cappedRun(
  ctx: Ctx,
  n: number,
  timeoutMs: number,
  baseline: number,
): Promise<B2Result['capped']> {
  await prepareFake(ctx);
  await ctx.redis.admin.flushall();
  const svc = await ctx.service({ MAX_ACTIVE_RUNS: String(CAP) });
  let run;
  try {
    run = await serviceConcurrent(ctx, svc.url, n, 'b2-cap-', timeoutMs);
  } finally {
    await svc.stop();
  }
  const arr = arrivalsByTag(await ctx.fakeCtl.requests(0), 'b2-cap-');
  const iters = [...arr.values()].reduce((a, l) => a + l.length, 0);
  const over = intervals(arr).map((v) => v - baseline);
  return {
    maxActiveRuns: CAP,
    seconds: (run.t1 - run.t0) / 1000,
    itersPerSec: iters / ((run.t1 - run.t0) / 1000),
    overheadMs: { p50: median(over), p99: percentile(over, 99) },
    errors: run.errors,
  };
}

interface Side {
  /** Median over the rounds. */
  seconds: number;
  /** Median over the rounds. */
  itersPerSec: number;
  perRound: number[];
  iterMs: { p50: number; p99: number };
  overheadMs: { p50: number; p99: number };
  /** The round with the highest peak. */
  rss: { start: number; peak: number; end: number };
  errors: number;
}

const ITER = 5;

/** Ends when every session's run has ended; the service side of B2. */
export async function serviceConcurrent(
  ctx: Ctx,
  base: string,
  n: number,
  prefix: string,
  timeoutMs: number,
) {
  const t0 = nowMs();
  let errors = 0;
  const retries: RetryCount = { unavailable: 0, network: 0 };
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
          retries,
        );
        return r.t1;
      } catch (err) {
        if (errors++ < 3) ctx.log(`  B2 session ${i}: ${String(err).slice(0, 200)}`);
        return NaN;
      }
    },
  );
  const t1 = Math.max(...ends.filter(Number.isFinite));
  return { t0, t1, errors, retries };
}

/**
 * The same load without followers: the sessions are created (same bodies, same burst) and nobody subscribes; the
 * run ends when the fake has seen every session's ITER requests (polled from its own process) and the last reply
 * has streamed (one unloaded iteration, `lastTurnMs`, after the last request).
 */
async function serviceUnfollowed(
  ctx: Ctx,
  base: string,
  n: number,
  prefix: string,
  timeoutMs: number,
  lastTurnMs: number,
) {
  const since = (await ctx.fakeCtl.stats()).requests;
  const t0 = nowMs();
  let errors = 0;
  const retries: RetryCount = { unavailable: 0, network: 0 };
  await pool(
    Array.from({ length: n }, (_, i) => i),
    n,
    async (i) => {
      try {
        await postWithRetry(
          `${base}/v1/sessions`,
          { tools: ['calculate_sum'], input: `${prefix}${i}`, max_iterations: 10 },
          retries,
        );
      } catch (err) {
        if (errors++ < 3) ctx.log(`  B2 session ${i} (no followers): ${String(err).slice(0, 200)}`);
      }
    },
  );
  const deadline = Date.now() + timeoutMs;
  while ((await ctx.fakeCtl.stats()).requests - since < (n - errors) * ITER) {
    if (Date.now() > deadline) throw new Error('B2 without followers: timed out');
    await sleep(50);
  }
  const arr = arrivalsByTag(await ctx.fakeCtl.requests(since), prefix);
  const last = Math.max(...[...arr.values()].map((l) => l.at(-1)!));
  return { t0, t1: last + lastTurnMs, errors, retries };
}

async function prepareFake(ctx: Ctx) {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.script(`tool-loop:${ITER}`);
  await ctx.fakeCtl.pacing(ctx.turnEventDelayMs);
}

interface Round {
  svc: {
    t0: number;
    t1: number;
    errors: number;
    retries: RetryCount;
    rss: Side['rss'];
    redisUsed: number;
    redisPeak: number;
  };
  sdk: { t0: number; t1: number; errors: number; rss: Side['rss'] };
  /** The service with the same load and no followers: iterations/s and CPU. */
  bare: { itersPerSec: number; cpu: Record<string, number>; iters: number; errors: number };
  svcGaps: number[];
  sdkGaps: number[];
  svcIters: number;
  sdkIters: number;
  svcCpu: Record<string, number>;
  sdkCpu: Record<string, number>;
}

/** One round: the service, then the in-process runners, each in a fresh process, on a reset fake. */
async function round(ctx: Ctx, n: number, r: number, timeoutMs: number, baseline: number): Promise<Round> {
  await prepareFake(ctx);
  await ctx.redis.admin.flushall();
  const svc = await ctx.service();
  let redisPeak = 0;
  const redisTimer = setInterval(() => {
    redisInfo(ctx.redis.admin, 'memory').then(
      (m) => (redisPeak = Math.max(redisPeak, Number(m['used_memory']))),
      () => {},
    );
  }, 250);
  const svcRss = new RssSampler(svc.pid);
  const svcMeter = cpuMeter({ service: svc.pid, redis: ctx.redis.pid, fake: ctx.fake.child.pid });
  let svcRun;
  let svcCpu: Record<string, number>;
  try {
    svcRun = await serviceConcurrent(ctx, svc.url, n, `b2-svc-${r}-`, timeoutMs);
  } finally {
    svcCpu = svcMeter();
    clearInterval(redisTimer);
  }
  const svcMem = svcRss.stop();
  const redisUsed = Number((await redisInfo(ctx.redis.admin, 'memory'))['used_memory']);
  await svc.stop();

  await ctx.redis.admin.flushall();
  const bareSvc = await ctx.service();
  const bareMeter = cpuMeter({ service: bareSvc.pid, redis: ctx.redis.pid, fake: ctx.fake.child.pid });
  let bareRun;
  let bareCpu: Record<string, number>;
  try {
    bareRun = await serviceUnfollowed(ctx, bareSvc.url, n, `b2-bare-${r}-`, timeoutMs, baseline);
  } finally {
    bareCpu = bareMeter();
    await bareSvc.stop();
  }

  const worker = await InprocWorker.start(ctx.fake.url);
  const sdkRss = new RssSampler(worker.pid);
  const sdkMeter = cpuMeter({ runner: worker.pid, redis: ctx.redis.pid, fake: ctx.fake.child.pid });
  const sdkRun = await worker.run(n, `b2-sdk-${r}-`, 10, timeoutMs);
  const sdkCpu = sdkMeter();
  const sdkMem = sdkRss.stop();
  await worker.stop();

  const records = await ctx.fakeCtl.requests(0);
  const svcArr = arrivalsByTag(records, `b2-svc-${r}-`);
  const sdkArr = arrivalsByTag(records, `b2-sdk-${r}-`);
  const count = (arr: Map<string, number[]>) => [...arr.values()].reduce((a, l) => a + l.length, 0);
  const bareIters = count(arrivalsByTag(records, `b2-bare-${r}-`));
  return {
    bare: {
      itersPerSec: bareIters / ((bareRun.t1 - bareRun.t0) / 1000),
      cpu: bareCpu,
      iters: bareIters,
      errors: bareRun.errors,
    },
    svc: { ...svcRun, rss: svcMem, redisUsed, redisPeak: Math.max(redisPeak, redisUsed) },
    sdk: { t0: sdkRun.t0, t1: sdkRun.t1, errors: sdkRun.errorCount, rss: sdkMem },
    svcGaps: intervals(svcArr),
    sdkGaps: intervals(sdkArr),
    svcIters: count(svcArr),
    sdkIters: count(sdkArr),
    svcCpu,
    sdkCpu,
  };
}

export async function b2(ctx: Ctx): Promise<B2Result> {
  const n = ctx.quick ? 200 : 1000;
  const rounds = ctx.quick ? 1 : 3;
  const timeoutMs = ctx.quick ? 60_000 : 180_000;

  // The in-process baseline of one iteration at this pacing, unloaded (from B1, or measured here).
  let baseline = ctx.baselineIterationMs;
  if (baseline === undefined) {
    await prepareFake(ctx);
    const worker = await InprocWorker.start(ctx.fake.url);
    for (let i = 0; i < 8; i++) await worker.run(1, `b2-cal-${i}-`, 10, 30_000);
    await worker.stop();
    const arr = arrivalsByTag(await ctx.fakeCtl.requests(0), 'b2-cal-');
    for (let i = 0; i < 3; i++) arr.delete(`b2-cal-${i}-0`); // warm-up
    baseline = median(intervals(arr));
  }

  const all: Round[] = [];
  for (let r = 0; r < rounds; r++) {
    all.push(await round(ctx, n, r, timeoutMs, baseline));
    const last = all.at(-1)!;
    ctx.log(
      `  B2 round ${r + 1}/${rounds}: service ${(last.svcIters / ((last.svc.t1 - last.svc.t0) / 1000)).toFixed(0)} ` +
        `iterations/s, without followers ${last.bare.itersPerSec.toFixed(0)}, ` +
        `in-process ${(last.sdkIters / ((last.sdk.t1 - last.sdk.t0) / 1000)).toFixed(0)}`,
    );
  }
  const side = (which: 'svc' | 'sdk'): Side => {
    const gaps = all.flatMap((x) => (which === 'svc' ? x.svcGaps : x.sdkGaps));
    const over = gaps.map((v) => v - baseline!);
    const rates = all.map(
      (x) => (which === 'svc' ? x.svcIters : x.sdkIters) / ((x[which].t1 - x[which].t0) / 1000),
    );
    const seconds = all.map((x) => (x[which].t1 - x[which].t0) / 1000);
    const iterations = all.reduce((a, x) => a + (which === 'svc' ? x.svcIters : x.sdkIters), 0);
    return {
      seconds: median(seconds),
      itersPerSec: median(rates),
      perRound: rates,
      iterMs: { p50: median(gaps), p99: percentile(gaps, 99) },
      overheadMs: { p50: median(over), p99: percentile(over, 99) },
      rss: all.map((x) => x[which].rss).reduce((a, b) => (b.peak > a.peak ? b : a)),
      errors:
        all.reduce((a, x) => a + x[which].errors, 0) + Math.max(0, rounds * n * ITER - iterations) / ITER,
    };
  };
  const svcSide = side('svc');
  const sdkSide = side('sdk');
  const capped = await cappedRun(ctx, n, timeoutMs, baseline);
  ctx.log(`  B2 with MAX_ACTIVE_RUNS=${CAP}: service ${capped.itersPerSec.toFixed(0)} iterations/s`);
  const ratios = all.map(
    (x) => x.svcIters / ((x.svc.t1 - x.svc.t0) / 1000) / (x.sdkIters / ((x.sdk.t1 - x.sdk.t0) / 1000)),
  );
  const ratio = median(ratios);
  const bareRatios = all.map((x) => x.bare.itersPerSec / (x.sdkIters / ((x.sdk.t1 - x.sdk.t0) / 1000)));
  const bareCpuPerIter = Object.fromEntries(
    Object.keys(all[0]!.bare.cpu).map((k) => [k, median(all.map((x) => x.bare.cpu[k]! / x.bare.iters))]),
  );
  const last = all.at(-1)!;
  const cpuPerIter = (which: 'svc' | 'sdk') => {
    const keys = Object.keys(which === 'svc' ? all[0]!.svcCpu : all[0]!.sdkCpu);
    return Object.fromEntries(
      keys.map((k) => [
        k,
        median(all.map((x) => (which === 'svc' ? x.svcCpu[k]! / x.svcIters : x.sdkCpu[k]! / x.sdkIters))),
      ]),
    );
  };
  return {
    cpuPerIter: { svc: cpuPerIter('svc'), sdk: cpuPerIter('sdk') },
    bare: {
      itersPerSec: median(all.map((x) => x.bare.itersPerSec)),
      ratio: median(bareRatios),
      ratios: bareRatios,
      cpuPerIter: bareCpuPerIter,
      errors: all.reduce((a, x) => a + x.bare.errors, 0),
    },
    capped,
    sessions: n,
    iterations: ITER,
    rounds,
    svc: {
      ...svcSide,
      redisUsedBytes: last.svc.redisUsed,
      redisPeakBytes: last.svc.redisPeak,
      retries: {
        unavailable: all.reduce((a, x) => a + x.svc.retries.unavailable, 0),
        network: all.reduce((a, x) => a + x.svc.retries.network, 0),
      },
    },
    sdk: sdkSide,
    baselineIterMs: baseline,
    throughputRatio: ratio,
    ratios,
    verdict: verdict(ratio >= 0.8 && svcSide.overheadMs.p99 <= 20 && svcSide.errors === 0),
  };
}

export async function b2Profile(ctx: Ctx, profiled: Profiled) {
  await prepareFake(ctx);
  await ctx.redis.admin.flushall();
  await profiled({}, async (svc) => {
    await serviceConcurrent(ctx, svc.url, ctx.quick ? 200 : 1000, 'b2-prof-', 180_000);
  });
}
