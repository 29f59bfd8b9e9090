/**
 * B8 metrics cost: what the Prometheus metrics cost on the hot path, with and without scraping.
 *
 * 1. The instrumentation alone, in this process: the calls one streamed tool-loop iteration makes (turn start, reply,
 *    tool, commit wrapper, turn end, and a few fanned-out relay batches), timed against the same loop without them.
 * 2. The service under load (N sessions × 5 iterations, as B2), fresh processes alternating: once unscraped, once with
 *    a scraper reading `/metrics` every SCRAPE_MS (far more often than the compose profile's Prometheus, every 5 s);
 *    the service's CPU per iteration on each side.
 * 3. One scrape on its own: the service's CPU per `/metrics` answer after the load, and its size.
 */
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { Ctx, Profiled } from '../lib/context.js';
import { arrivalsByTag } from '../lib/fake.js';
import { cpuMeter } from '../lib/procs.js';
import { median } from '../lib/util.js';
import { Metrics } from '../../src/observability/metrics.js';
import { RunTelemetry, toolRan } from '../../src/observability/run-telemetry.js';
import { Tracing } from '../../src/observability/tracing.js';
import { serviceConcurrent } from './b2.js';
import { verdict, type Verdict } from './common.js';

export interface B8Result {
  /** µs of CPU per iteration spent in the metrics calls (in-process loop, net of the same loop without them). */
  instrumentationUsPerIter: number;
  microIterations: number;
  sessions: number;
  rounds: number;
  scrapeMs: number;
  /** Service CPU ms per iteration, median over the rounds. */
  cpuPerIter: { unscraped: number; scraped: number };
  /** Each round's service CPU (ms) and iterations, unscraped and scraped. */
  perRound: Array<{ unscraped: [number, number]; scraped: [number, number] }>;
  /** Scrapes answered during the scraped runs, all rounds. */
  scrapes: number;
  /** The service's CPU per `/metrics` answer (ms) and the answer's size (bytes), after the load. */
  perScrape: { cpuMs: number; bytes: number };
  /** The instrumentation's share of the service's CPU per iteration (unscraped). */
  share: number;
  verdict: Verdict;
}

const ITER = 5;
/** Relay batches per streamed iteration, about: turn.started, the deltas in a few loop turns, the commit's events. */
const BATCHES = 4;
const SCRAPE_MS = 100;

const message = {
  id: 'msg_bench',
  type: 'message',
  role: 'assistant',
  model: 'claude-bench',
  content: [],
  stop_reason: 'tool_use',
  stop_sequence: null,
  usage: { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
} as unknown as BetaMessage;

const nothing = async () => undefined;

/** CPU µs per iteration of `iterate`, over `n` iterations in runs of ITER (one RunTelemetry per run). */
async function cpuUs(n: number, iterate: (obs: RunTelemetry, i: number) => Promise<void>, m: Metrics) {
  const t0 = process.cpuUsage();
  for (let r = 0; r < n / ITER; r++) {
    const obs = new RunTelemetry(m, Tracing.off, `ses_bench${r}`);
    await obs.run(async () => {
      for (let i = 0; i < ITER; i++) await iterate(obs, i);
    });
  }
  const u = process.cpuUsage(t0);
  return (u.user + u.system) / n;
}

/** The metrics calls of one streamed tool-loop iteration, as the engine and the relay make them. */
async function instrumented(obs: RunTelemetry, i: number, m: Metrics): Promise<void> {
  obs.turnStarted(i + 1, { model: 'claude-bench', max_tokens: 1024 });
  obs.turnReplied(message, { upstream_ms: 20, first_event_ms: 3 });
  await obs.inTurn(async () => toolRan(m, 'calculate_sum', 0.05, true));
  await obs.commit(nothing);
  obs.turnEnded();
  for (let b = 0; b < BATCHES; b++) {
    m.eventsRelayed.inc(3);
    m.relayLag.observe(0.0008);
  }
}

/** The same awaits without the metrics. */
async function bare(): Promise<void> {
  await (async () => undefined)();
  await nothing();
}

async function micro(n: number): Promise<number> {
  const m = new Metrics({ defaultMetrics: false });
  // Alternating, best of 3 each: this process shares 2 cores with the others.
  const withM: number[] = [];
  const without: number[] = [];
  for (let k = 0; k < 3; k++) {
    without.push(await cpuUs(n, () => bare(), m));
    withM.push(await cpuUs(n, (obs, i) => instrumented(obs, i, m), m));
  }
  return Math.max(0, Math.min(...withM) - Math.min(...without));
}

async function prepareFake(ctx: Ctx) {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.script(`tool-loop:${ITER}`);
  await ctx.fakeCtl.pacing(ctx.turnEventDelayMs);
}

/** One service run of N sessions; `scrape` reads /metrics every SCRAPE_MS meanwhile. CPU ms per iteration. */
async function loadRun(ctx: Ctx, n: number, tag: string, scrape: boolean) {
  await prepareFake(ctx);
  await ctx.redis.admin.flushall();
  const svc = await ctx.service();
  let scrapes = 0;
  let stop = false;
  const scraper = (async () => {
    while (scrape && !stop) {
      const res = await fetch(`${svc.url}/metrics`);
      await res.text();
      if (res.ok) scrapes++;
      await new Promise((r) => setTimeout(r, SCRAPE_MS));
    }
  })();
  const meter = cpuMeter({ service: svc.pid });
  let cpu: Record<string, number>;
  try {
    await serviceConcurrent(ctx, svc.url, n, tag, ctx.quick ? 60_000 : 180_000);
  } finally {
    cpu = meter();
    stop = true;
    await scraper;
  }
  let perScrape = { cpuMs: NaN, bytes: NaN };
  if (!scrape) {
    // A scrape on its own, after the load: the registry holds every series the run made.
    const k = 100;
    const m2 = cpuMeter({ service: svc.pid });
    let bytes = 0;
    for (let i = 0; i < k; i++) bytes = (await (await fetch(`${svc.url}/metrics`)).text()).length;
    perScrape = { cpuMs: m2()['service']! / k, bytes };
  }
  await svc.stop();
  const arr = arrivalsByTag(await ctx.fakeCtl.requests(0), tag);
  const iters = [...arr.values()].reduce((a, l) => a + l.length, 0);
  return { cpuMs: cpu['service']!, iters, cpuPerIter: cpu['service']! / iters, scrapes, perScrape };
}

export async function b8(ctx: Ctx): Promise<B8Result> {
  const n = ctx.quick ? 100 : 500;
  const rounds = ctx.quick ? 1 : 3;
  const microIterations = ctx.quick ? 20_000 : 100_000;
  const instrumentationUsPerIter = await micro(microIterations);
  const unscraped: number[] = [];
  const scraped: number[] = [];
  let scrapes = 0;
  const perRound: B8Result['perRound'] = [];
  let perScrape = { cpuMs: NaN, bytes: NaN };
  for (let r = 0; r < rounds; r++) {
    const a = await loadRun(ctx, n, `b8-plain-${r}-`, false);
    const b = await loadRun(ctx, n, `b8-scraped-${r}-`, true);
    unscraped.push(a.cpuPerIter);
    scraped.push(b.cpuPerIter);
    scrapes += b.scrapes;
    perRound.push({ unscraped: [a.cpuMs, a.iters], scraped: [b.cpuMs, b.iters] });
    perScrape = a.perScrape;
    ctx.log(
      `  B8 round ${r + 1}/${rounds}: service CPU per iteration ${a.cpuPerIter.toFixed(3)} ms unscraped, ` +
        `${b.cpuPerIter.toFixed(3)} ms scraped every ${SCRAPE_MS} ms (${b.scrapes} scrapes)`,
    );
  }
  const cpuPerIter = { unscraped: median(unscraped), scraped: median(scraped) };
  const share = instrumentationUsPerIter / 1000 / cpuPerIter.unscraped;
  return {
    instrumentationUsPerIter,
    microIterations,
    sessions: n,
    rounds,
    scrapeMs: SCRAPE_MS,
    cpuPerIter,
    scrapes,
    perRound,
    perScrape,
    share,
    // The hot path's budget for metrics: at most 2 % of the service's CPU per iteration.
    verdict: verdict(share <= 0.02),
  };
}

/** The loaded service side of B8 again, scraped, under the CPU profiler. */
export async function b8Profile(ctx: Ctx, profiled: Profiled) {
  await prepareFake(ctx);
  await ctx.redis.admin.flushall();
  await profiled({}, async (svc) => {
    let stop = false;
    const scraper = (async () => {
      while (!stop) {
        await (await fetch(`${svc.url}/metrics`)).text();
        await new Promise((r) => setTimeout(r, SCRAPE_MS));
      }
    })();
    try {
      await serviceConcurrent(ctx, svc.url, ctx.quick ? 100 : 500, 'b8-prof-', 180_000);
    } finally {
      stop = true;
      await scraper;
    }
  });
}
