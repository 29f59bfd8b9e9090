/**
 * B1, eager-tools variant: the same 10-iteration loop through the service, but each turn calls a tool that takes
 * 50 ms (the test-only `sleep_idempotent`, loaded through SERVER_TOOLS_MODULE), run with `run_tools_eagerly` off and on, alternating. Two
 * reply shapes: the call ends the reply (the usual shape: the call is complete only at `message_delta`, so at most
 * the last event's time is saved), and a sentence follows the call (the call starts while the sentence streams).
 * Iteration time is read on the fake's side (the gap between two requests of a conversation); the gain is the
 * difference of the medians, off minus on.
 */
import path from 'node:path';
import type { Ctx } from '../lib/context.js';
import { arrivalsByTag, intervals } from '../lib/fake.js';
import { BENCH_DIST } from '../lib/procs.js';
import { median, percentile } from '../lib/util.js';
import { createAndFollow } from './common.js';

const ITER = 10;
const TOOL_MS = 50;

export interface EagerShapeResult {
  /** The fake script of the loop. */
  script: string;
  offIterMs: { p50: number; p99: number };
  onIterMs: { p50: number; p99: number };
  /** Per iteration, p50 off − p50 on. */
  gainMs: number;
  samples: { off: number; on: number };
}

export interface B1EagerResult {
  runs: number;
  toolMs: number;
  callLast: EagerShapeResult;
  textAfter: EagerShapeResult;
}

async function shape(ctx: Ctx, base: string, script: string, runs: number, tag: string) {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.script(script);
  await ctx.fakeCtl.pacing(ctx.turnEventDelayMs);
  const warm = 1;
  for (let i = 0; i < warm + runs; i++) {
    for (const eager of [false, true]) {
      const prefix = i < warm ? `${tag}-warm-` : `${tag}-${eager ? 'on' : 'off'}-`;
      await createAndFollow(
        ctx,
        base,
        {
          tools: ['sleep_idempotent'],
          input: `${prefix}${i}`,
          max_iterations: ITER,
          run_tools_eagerly: eager,
        },
        30_000,
      );
    }
  }
  const records = await ctx.fakeCtl.requests(0);
  const off = intervals(arrivalsByTag(records, `${tag}-off-`));
  const on = intervals(arrivalsByTag(records, `${tag}-on-`));
  const res: EagerShapeResult = {
    script,
    offIterMs: { p50: median(off), p99: percentile(off, 99) },
    onIterMs: { p50: median(on), p99: percentile(on, 99) },
    gainMs: median(off) - median(on),
    samples: { off: off.length, on: on.length },
  };
  return res;
}

export async function b1Eager(ctx: Ctx): Promise<B1EagerResult> {
  const runs = ctx.quick ? 6 : 20;
  await ctx.redis.admin.flushall();
  const svc = await ctx.service({
    SERVER_TOOLS_MODULE: path.join(BENCH_DIST, 'test', 'tools', 'testing.js'),
  });
  try {
    const base = `tool-loop:${ITER}:sleep_idempotent:${TOOL_MS}`;
    const callLast = await shape(ctx, svc.url, base, runs, 'b1e-last');
    const textAfter = await shape(ctx, svc.url, `${base}:text`, runs, 'b1e-text');
    return { runs, toolMs: TOOL_MS, callLast, textAfter };
  } finally {
    await svc.stop();
    await ctx.fakeCtl.reset();
  }
}
