/**
 * `npm run bench` — the service against the SDK's in-process tool runner and its relay against `resumable-stream`,
 * in one run, writing docs/BENCHMARKS.md (every figure in it comes from this script).
 *
 *   npm run bench                      full run (B1–B9), CPU profiles of the scenarios that miss their target;
 *                                      writes docs/BENCHMARKS.md
 *   npm run bench -- --quick           smaller loads, no profiles, a few minutes on a quiet machine; writes
 *                                      .data/BENCHMARKS.quick.md
 *   options: --only B1,B3  --out <file>  --profile (profile misses in --quick too)  --no-profile
 *            --render .data/bench-results.json   (the report again from the figures of an earlier run)
 *            --render a.json --overlay b.json --overlay-only B6   (the scenarios named taken from run b, e.g. a
 *                                      full-size B6 into a quick run's report; the report says so)
 *   experiments (environment, the service process only): BENCH_SERVICE_NODE_FLAGS='--max-semi-space-size=16'
 *            (replaces `npm start`'s node flags), BENCH_SERVICE_GC_LOG=<file> (`--trace-gc` lines appended there),
 *            BENCH_SERVICE_NODE_OPTIONS (NODE_OPTIONS); BENCH_B9_STEPS=400,500 (B9 at those Ns only)
 *
 * Processes (all on 127.0.0.1, free ports): a private redis-server (append-only, as the service's embedded Redis
 * runs), the fake Messages API (test/fake/main.ts), a fresh service process per scenario (src/server.ts), the
 * in-process SDK runner (bench/inproc.ts), the resumable-stream peer (bench/peer-resumable.ts) and, for B3, a tap
 * in front of the fake (bench/tap.ts); the clients (REST, WebSocket subscribers) live in this process. Every wait is
 * bounded, and the whole run too (HARD_LIMIT_MS).
 */
import { rmSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { machine, serviceStarter, type Ctx, type Machine, type Profiled } from './lib/context.js';
import { cpuProfile } from './lib/inspector.js';
import { FakeControl } from './lib/fake.js';
import { BENCH_DIST, buildForBench, ROOT, startFake, startRedis } from './lib/procs.js';
import { summarize, type CpuProfile, type ProfileSummary } from './lib/profile.js';
import { wsRouteAvailable } from './lib/ws.js';
import { b1, b1Profile, type B1Result } from './scenarios/b1.js';
import { b2, b2Profile, type B2Result } from './scenarios/b2.js';
import { b3, b3Profile, type B3Result } from './scenarios/b3.js';
import { b4, b4Profile, type B4Result } from './scenarios/b4.js';
import { b5, b5Profile, type B5Result } from './scenarios/b5.js';
import { b6, b6Profile, type B6Result } from './scenarios/b6.js';
import { b7, b7Profile, type B7Result } from './scenarios/b7.js';
import { b8, b8Profile, type B8Result } from './scenarios/b8.js';
import { b9, type B9Result } from './scenarios/b9.js';
import { report } from './report.js';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    out: { type: 'string' },
    profile: { type: 'boolean' },
    'profile-dir': { type: 'string' },
    render: { type: 'string' },
    overlay: { type: 'string' },
    'overlay-only': { type: 'string' },
    'no-profile': { type: 'boolean', default: false },
  },
  strict: true,
});

const quick = values.quick!;
const only = new Set(
  (values.only ?? 'B1,B2,B3,B4,B5,B6,B7,B8,B9')
    .toUpperCase()
    .split(',')
    .map((s) => s.trim()),
);
// The full run writes the committed report; a quick run (a smoke test) writes beside it, git-ignored, unless told.
const out = path.resolve(ROOT, values.out ?? (quick ? '.data/BENCHMARKS.quick.md' : 'docs/BENCHMARKS.md'));
const doProfile = values['no-profile'] ? false : (values.profile ?? !quick);
// The profiles of misses are kept (for speedscope or Chrome DevTools); *.cpuprofile is git-ignored.
const profileDir = path.resolve(ROOT, values['profile-dir'] ?? '.data/bench-profiles');
// Hard bound of the whole run: a stuck scenario cannot keep the machine busy.
const HARD_LIMIT_MS = quick ? 30 * 60_000 : 40 * 60_000;

export interface Results {
  mode: 'full' | 'quick';
  machine: Machine;
  follow: 'ws' | 'poll';
  turnEventDelayMs: number;
  seconds: number;
  B1?: B1Result | Error;
  B2?: B2Result | Error;
  B3?: B3Result | Error;
  B4?: B4Result | Error;
  B5?: B5Result | Error;
  B6?: B6Result | Error;
  B7?: B7Result | Error;
  B8?: B8Result | Error;
  B9?: B9Result | Error;
  profiles: Record<string, ProfileSummary | Error>;
  /** The 1-minute load average when each scenario started (other work on the machine shows here). */
  load: Record<string, number>;
  /** Scenarios whose figures come from another run (`--overlay`): that run's mode and date. */
  overlay?: { scenarios: string[]; mode: 'full' | 'quick'; date: string };
}

const started = performance.now();
const log = (msg: string) =>
  process.stdout.write(`[bench ${((performance.now() - started) / 1000).toFixed(1).padStart(6)}s] ${msg}\n`);

const hard = setTimeout(() => {
  log(`hard time limit (${HARD_LIMIT_MS / 1000} s) reached: stopping`);
  process.exit(3);
}, HARD_LIMIT_MS);
hard.unref();

async function main() {
  log(
    `mode ${quick ? 'quick' : 'full'}; scenarios ${[...only].join(',')}; report ${path.relative(ROOT, out)}`,
  );
  const t0 = Date.now();
  buildForBench();
  log(`compiled to JavaScript in ${Date.now() - t0} ms (${path.relative(ROOT, BENCH_DIST)})`);
  const tmpDir = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-bench-'));
  process.once('exit', () => rmSync(tmpDir, { recursive: true, force: true }));
  const redis = await startRedis();
  const fake = await startFake(0, 'tool-loop:10');
  log(`redis ${redis.url} (pid ${redis.pid}), fake ${fake.url} (pid ${fake.child.pid})`);
  const start = serviceStarter(redis, fake);
  const ctx: Ctx = {
    quick,
    redis,
    fake,
    fakeCtl: new FakeControl(fake.url),
    tmpDir,
    follow: 'ws',
    log,
    service: (env = {}, cpuProfDir?: string) => startProbed({ env, cpuProfDir }),
    startService: (opts) => startProbed(opts),
    turnEventDelayMs: 2.5,
  };
  // Which way clients follow sessions: the WebSocket route (spec §5), or polling while it is missing; found out on
  // the first service started.
  let probed = false;
  async function startProbed(opts: Parameters<typeof start>[0]) {
    const svc = await start(opts);
    if (!probed) {
      probed = true;
      ctx.follow = (await wsRouteAvailable(svc.url)) ? 'ws' : 'poll';
      if (ctx.follow === 'poll')
        log('WARNING: the WebSocket route is missing; clients poll GET /v1/sessions/:id');
    }
    return svc;
  }

  const results: Results = {
    mode: quick ? 'quick' : 'full',
    machine: await machine(redis),
    follow: ctx.follow,
    turnEventDelayMs: ctx.turnEventDelayMs,
    seconds: 0,
    profiles: {},
    load: {},
  };

  const scenarios: Array<[keyof Results & string, () => Promise<any>, ((p: Profiled) => Promise<void>)?]> = [
    ['B1', () => b1(ctx), (p) => b1Profile(ctx, p)],
    ['B2', () => b2(ctx), (p) => b2Profile(ctx, p)],
    ['B3', () => b3(ctx), (p) => b3Profile(ctx, p)],
    ['B4', () => b4(ctx), (p) => b4Profile(ctx, p)],
    ['B5', () => b5(ctx), (p) => b5Profile(ctx, p)],
    ['B6', () => b6(ctx, results.machine.openFiles), (p) => b6Profile(ctx, p)],
    ['B7', () => b7(ctx), (p) => b7Profile(ctx, p)],
    ['B8', () => b8(ctx), (p) => b8Profile(ctx, p)],
    // No profile: B9 is a ramp; its CPU split per step is in the report.
    ['B9', () => b9(ctx)],
  ];
  try {
    for (const [name, run] of scenarios) {
      if (!only.has(name)) continue;
      const t = performance.now();
      results.load[name] = os.loadavg()[0]!;
      log(`${name} … (load average ${results.load[name]!.toFixed(2)})`);
      try {
        const r = await run();
        (results as any)[name] = r;
        log(`${name} done in ${((performance.now() - t) / 1000).toFixed(1)} s: ${r.verdict}`);
      } catch (err) {
        (results as any)[name] = err instanceof Error ? err : new Error(String(err));
        log(`${name} FAILED: ${err instanceof Error ? err.stack : String(err)}`);
      }
    }
    if (doProfile) {
      for (const [name, , profile] of scenarios) {
        const r = (results as any)[name];
        if (!profile || !r || r instanceof Error || r.verdict !== 'MISS') continue;
        log(`${name} missed its target: running its service side again under the CPU profiler …`);
        try {
          let prof: CpuProfile | undefined;
          await profile(async (env, work) => {
            const svc = await ctx.startService({ env, inspectOnSignal: true });
            try {
              const inspector = await svc.activateInspector();
              prof = (await cpuProfile(inspector, () => work(svc))) as CpuProfile;
            } finally {
              await svc.stop();
            }
          });
          if (!prof) throw new Error('no profile was taken');
          const file = path.join(profileDir, `${name}.cpuprofile`);
          await mkdir(profileDir, { recursive: true });
          await writeFile(file, JSON.stringify(prof));
          results.profiles[name] = summarize(prof, path.relative(ROOT, file));
        } catch (err) {
          results.profiles[name] = err instanceof Error ? err : new Error(String(err));
          log(`${name} profile FAILED: ${String(err)}`);
        }
      }
    }
  } finally {
    await fake.stop();
    await redis.stop();
    await rm(tmpDir, { recursive: true, force: true });
  }
  results.seconds = (performance.now() - started) / 1000;
  results.follow = ctx.follow;
  await mkdir(path.dirname(out), { recursive: true });
  await writeFile(out, report(results));
  // The figures of the run, for `--render` (git-ignored).
  const json = path.resolve(ROOT, '.data', `bench-results${quick ? '.quick' : ''}.json`);
  await mkdir(path.dirname(json), { recursive: true });
  await writeFile(json, serialize(results));
  log(`wrote ${path.relative(ROOT, out)} (${results.seconds.toFixed(0)} s)`);
}

/** Results as JSON (errors as `{"error": message}`), kept beside the report so it can be re-rendered. */
function serialize(results: Results): string {
  return JSON.stringify(results, (_k, v) => (v instanceof Error ? { error: v.message } : v), 1);
}

function deserialize(text: string): Results {
  return JSON.parse(text, (_k, v) =>
    v && typeof v === 'object' && Object.keys(v).length === 1 && typeof v.error === 'string'
      ? new Error(v.error)
      : v,
  ) as Results;
}

// `--render <results.json>`: writes the report again from the figures of an earlier run (no measuring).
if (values.render) {
  const results = deserialize(await readFile(path.resolve(ROOT, values.render), 'utf8'));
  if (values.overlay) {
    const other = deserialize(await readFile(path.resolve(ROOT, values.overlay), 'utf8'));
    const names = (values['overlay-only'] ?? '').toUpperCase().split(',').filter(Boolean);
    const picked = names.filter((n) => (other as any)[n] !== undefined);
    for (const n of picked) {
      (results as any)[n] = (other as any)[n];
      if (other.load[n] !== undefined) results.load[n] = other.load[n]!;
    }
    results.overlay = { scenarios: picked, mode: other.mode, date: other.machine.date };
  }
  await writeFile(out, report(results));
  log(`rendered ${path.relative(ROOT, out)} from ${values.render} (run of ${results.machine.date})`);
  process.exit(0);
}

main().then(
  () => process.exit(0),
  (err) => {
    log(`bench failed: ${err instanceof Error ? err.stack : String(err)}`);
    process.exit(1);
  },
);
