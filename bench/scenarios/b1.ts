/**
 * B1 per-iteration overhead: the same 10-iteration calculate_sum loop through the service (REST create, WebSocket
 * follow until `session.status` idle, streaming) and through the SDK's toolRunner in-process, runs alternating.
 * Iteration time is read on the fake's side: the gap between two requests of one conversation.
 */
import { InprocWorker, type Ctx, type Profiled } from '../lib/context.js';
import { arrivalsByTag, intervals } from '../lib/fake.js';
import { httpOk, mean, median, percentile } from '../lib/util.js';
import { b1Eager, type B1EagerResult } from './b1-eager.js';
import { createAndFollow, verdict, type Verdict } from './common.js';

export interface B1Result {
  runs: number;
  warm: number;
  iterations: number;
  turnMs: number;
  svcWallMs: { p50: number; p99: number };
  sdkWallMs: { p50: number; p99: number };
  wallRatio: number;
  sdkIterMs: { p50: number; p99: number };
  svcIterMs: { p50: number; p99: number };
  addedMs: { p50: number; p99: number; mean: number; fromWall: number };
  samples: { svc: number; sdk: number };
  /**
   * Where an iteration's time goes, p50 (ms). upstream: from the runner yielding the turn to its final message (the
   * service: to its stream events drained into Redis); between: from there to the next turn's yield (the service:
   * the reply's commit, the tool, the results' commit). The service's figures come from its iteration records
   * (`GET /v1/sessions/:id/iterations`, millisecond timestamps), the in-process ones from the runner.
   */
  split: { svc: { upstream: number; between: number }; sdk: { upstream: number; between: number } };
  verdict: Verdict;
  /** The variant with a 50 ms tool, `run_tools_eagerly` off and on (b1-eager.ts); its error message if it failed. */
  eager?: B1EagerResult | string;
}

const ITER = 10;

export async function serviceRuns(ctx: Ctx, base: string, runs: number, prefix: string) {
  const walls: number[] = [];
  const ids: string[] = [];
  for (let i = 0; i < runs; i++) {
    const r = await createAndFollow(
      ctx,
      base,
      { tools: ['calculate_sum'], input: `${prefix}${i}`, max_iterations: ITER },
      30_000,
    );
    walls.push(r.wall);
    ids.push(r.id);
  }
  return { walls, ids };
}

/** The service's own split of each iteration, from its iteration records. */
async function serviceSplit(base: string, ids: string[]) {
  const upstream: number[] = [];
  const between: number[] = [];
  for (const id of ids) {
    const { data } = await httpOk('GET', `${base}/v1/sessions/${id}/iterations`);
    for (let i = 0; i < data.length; i++) {
      upstream.push(data[i].timings.upstream_ms);
      if (i > 0) between.push(Date.parse(data[i].started_at) - Date.parse(data[i - 1].completed_at));
    }
  }
  return { upstream: median(upstream), between: median(between) };
}

export async function b1(ctx: Ctx): Promise<B1Result> {
  const runs = ctx.quick ? 6 : 30;
  const warm = ctx.quick ? 1 : 2;
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.script(`tool-loop:${ITER}`);
  await ctx.fakeCtl.pacing(ctx.turnEventDelayMs);
  await ctx.redis.admin.flushall();
  const svc = await ctx.service();
  const worker = await InprocWorker.start(ctx.fake.url);
  const svcWalls: number[] = [];
  const sdkWalls: number[] = [];
  const svcIds: string[] = [];
  const sdkUpstream: number[] = [];
  const sdkBetween: number[] = [];
  let svcSplit: { upstream: number; between: number };
  try {
    for (let i = 0; i < warm + runs; i++) {
      const { walls, ids } = await serviceRuns(ctx, svc.url, 1, `b1-${i < warm ? 'warm' : 'svc'}-${i}-`);
      const r = await worker.run(1, `b1-${i < warm ? 'warmsdk' : 'sdk'}-${i}-`, ITER, 30_000);
      if (!r.ok) throw new Error(`in-process run failed: ${r.errors.join('; ')}`);
      if (i >= warm) {
        svcWalls.push(walls[0]!);
        svcIds.push(ids[0]!);
        sdkWalls.push(r.walls[0]!);
        sdkUpstream.push(...r.upstreamMs);
        sdkBetween.push(...r.betweenMs);
      }
    }
    svcSplit = await serviceSplit(svc.url, svcIds);
  } finally {
    await worker.stop();
    await svc.stop();
  }
  const records = await ctx.fakeCtl.requests(0);
  const svcArr = arrivalsByTag(records, 'b1-svc-');
  const sdkArr = arrivalsByTag(records, 'b1-sdk-');
  for (const [tag, list] of [...svcArr, ...sdkArr]) {
    if (list.length !== ITER)
      throw new Error(`${tag}: ${list.length} requests reached the fake, not ${ITER}`);
  }
  const svcIv = intervals(svcArr);
  const sdkIv = intervals(sdkArr);
  const base = median(sdkIv);
  ctx.baselineIterationMs = base;
  const added = svcIv.map((v) => v - base);
  const wallRatio = median(svcWalls) / median(sdkWalls);
  const res: B1Result = {
    runs,
    warm,
    iterations: ITER,
    turnMs: ctx.turnEventDelayMs * 8,
    svcWallMs: { p50: median(svcWalls), p99: percentile(svcWalls, 99) },
    sdkWallMs: { p50: median(sdkWalls), p99: percentile(sdkWalls, 99) },
    wallRatio,
    sdkIterMs: { p50: base, p99: percentile(sdkIv, 99) },
    svcIterMs: { p50: median(svcIv), p99: percentile(svcIv, 99) },
    addedMs: {
      p50: median(added),
      p99: percentile(added, 99),
      mean: mean(svcIv) - mean(sdkIv),
      fromWall: (median(svcWalls) - median(sdkWalls)) / ITER,
    },
    samples: { svc: svcIv.length, sdk: sdkIv.length },
    split: { svc: svcSplit, sdk: { upstream: median(sdkUpstream), between: median(sdkBetween) } },
    verdict: 'n/a',
    eager: 'not run',
  };
  res.verdict = verdict(res.addedMs.p50 <= 2);
  try {
    res.eager = await b1Eager(ctx);
  } catch (err) {
    res.eager = err instanceof Error ? err.message : String(err);
  }
  return res;
}

/** The service side of B1 again, under `--cpu-prof`, for the profile of a miss. */
/** The service side of B1 again, under the CPU profiler, for the profile of a miss. */
export async function b1Profile(ctx: Ctx, profiled: Profiled) {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.script(`tool-loop:${ITER}`);
  await ctx.fakeCtl.pacing(ctx.turnEventDelayMs);
  await profiled({}, async (svc) => {
    await serviceRuns(ctx, svc.url, ctx.quick ? 8 : 30, 'b1-prof-');
  });
}
