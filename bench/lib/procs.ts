/**
 * The processes of a benchmark run: a private redis-server, the fake Messages API (test/fake/main.ts), the service
 * (src/server.ts), and helper processes of the bench itself. All bind 127.0.0.1 on free ports; every child is
 * killed when the bench process exits.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  existsSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { freeLoopbackPort, launchRedisServer, type RedisServerProcess } from '../../src/redis/embedded.js';
import { sleep, withTimeout } from './util.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const live = new Set<ChildProcess>();
let exitHook = false;
function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (exitHook) return;
  exitHook = true;
  process.on('exit', () => {
    for (const c of live) {
      try {
        if (c.pid !== undefined) process.kill(c.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  });
}

/** A child process whose last output lines are kept (never the whole output: runs are long). */
export class Child {
  private tail: string[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(readonly child: ChildProcess) {
    track(child);
    this.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const keep = (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) this.tail.push(line);
      if (this.tail.length > 200) this.tail = this.tail.slice(-100);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
  }

  get pid(): number {
    return this.child.pid!;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  output(lines = 40): string {
    return this.tail.slice(-lines).join('\n');
  }

  /** Waits until a line of output matches `re`; resolves with the match. */
  waitFor(re: RegExp, timeoutMs: number, what: string): Promise<RegExpExecArray> {
    return withTimeout(
      new Promise<RegExpExecArray>((resolve, reject) => {
        let buf = '';
        const onData = (chunk: Buffer) => {
          buf += chunk.toString('utf8');
          const m = re.exec(buf);
          if (m) {
            cleanup();
            resolve(m);
          }
          if (buf.length > 1_000_000) buf = buf.slice(-10_000);
        };
        const onExit = (code: number | null, signal: string | null) => {
          cleanup();
          reject(new Error(`${what} exited (${code ?? signal}) before it was ready:\n${this.output()}`));
        };
        const cleanup = () => {
          this.child.stdout?.off('data', onData);
          this.child.stderr?.off('data', onData);
          this.child.off('exit', onExit);
        };
        this.child.stdout?.on('data', onData);
        this.child.stderr?.on('data', onData);
        this.child.once('exit', onExit);
      }),
      timeoutMs,
      what,
    );
  }

  /** SIGTERM (or `signal`), then SIGKILL after `timeoutMs`; resolves once the process is gone. */
  async stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 15_000): Promise<void> {
    if (!this.running) return;
    this.child.kill(signal);
    const timer = setTimeout(() => {
      if (this.running) this.child.kill('SIGKILL');
    }, timeoutMs);
    await this.exited;
    clearTimeout(timer);
  }
}

/** Where `buildForBench` writes the compiled JavaScript (git-ignored). */
export const BENCH_DIST = path.join(ROOT, '.data', 'bench-dist');

/**
 * Compiles src, routes, tools and bench to JavaScript (bench/tsconfig.build.json: the production build's options),
 * so every measured process runs as it does in production (`npm start`, the image): plain `node`, no TypeScript
 * loader — the service, the fake and the peers alike.
 */
export function buildForBench(): void {
  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const out = spawnSync(process.execPath, [tsc, '-p', 'bench/tsconfig.build.json'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (out.status !== 0)
    throw new Error(`tsc -p bench/tsconfig.build.json failed:\n${out.stdout}${out.stderr}`);
  // Lua scripts are read at run time beside the modules that load them, as `npm run build` copies them.
  for (const file of readdirSync(path.join(ROOT, 'src'), { recursive: true, encoding: 'utf8' })) {
    if (file.endsWith('.lua')) cpSync(path.join(ROOT, 'src', file), path.join(BENCH_DIST, 'src', file));
  }
}

/** Spawns `node [nodeArgs] <script compiled to JavaScript> [args]` from the project root (see buildForBench). */
export function spawnNode(
  script: string,
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; nodeArgs?: string[]; stdin?: boolean } = {},
): Child {
  const compiled = path.join(BENCH_DIST, script.replace(/\.ts$/, '.js'));
  if (!existsSync(compiled))
    throw new Error(`${path.relative(ROOT, compiled)} is missing: call buildForBench() first`);
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), compiled, ...args], {
    cwd: ROOT,
    env: opts.env ?? process.env,
    stdio: [opts.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  return new Child(child);
}

// ---- Redis ---------------------------------------------------------------------------------------------------

export interface BenchRedis {
  url: string;
  port: number;
  pid: number;
  /** An admin connection of the bench (INFO, FLUSHALL, pipelined XADD). */
  admin: Redis;
  stop(): Promise<void>;
}

/**
 * A private redis-server on a free loopback port (never 6379), configured as the service's embedded Redis runs it:
 * append-only file on (default `appendfsync everysec`), no RDB snapshots, in a temporary directory.
 */
export async function startRedis(): Promise<BenchRedis> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-bench-redis-'));
  // Removed even when the bench exits early (its redis-server is killed by src/redis/embedded.ts's exit hook).
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  process.once('exit', cleanup);
  let server: RedisServerProcess | undefined;
  for (let attempt = 1; !server; attempt++) {
    const port = await freeLoopbackPort();
    if (port === 6379) continue;
    try {
      server = await launchRedisServer({
        port,
        cwd: dir,
        args: ['--dir', dir, '--appendonly', 'yes', '--save', '', '--maxclients', '20000'],
      });
    } catch (err) {
      if (attempt >= 3) throw err;
    }
  }
  const admin = new Redis(server.url, { maxRetriesPerRequest: 1, enableAutoPipelining: false });
  return {
    url: server.url,
    port: server.port,
    pid: server.pid,
    admin,
    stop: async () => {
      admin.disconnect();
      await server.stop();
      await rm(dir, { recursive: true, force: true });
      process.off('exit', cleanup);
    },
  };
}

/** `INFO <section>` as a map of numbers and strings. */
export async function redisInfo(redis: Redis, section: string): Promise<Record<string, string>> {
  const text = await redis.info(section);
  const out: Record<string, string> = {};
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0 && !line.startsWith('#')) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

// ---- the fake Messages API -----------------------------------------------------------------------------------

export interface BenchFake {
  url: string;
  child: Child;
  stop(): Promise<void>;
}

/** The fake Messages API in its own process: `node test/fake/main.js --port 0 …` (compiled). */
export async function startFake(eventDelayMs: number, script: string): Promise<BenchFake> {
  const child = spawnNode('test/fake/main.ts', [
    '--port',
    '0',
    '--event-delay-ms',
    String(eventDelayMs),
    '--script',
    script,
  ]);
  const m = await child.waitFor(/\{"url":"(http:\/\/127\.0\.0\.1:\d+)"\}/, 30_000, 'the fake Messages API');
  return { url: m[1]!, child, stop: () => child.stop() };
}

// ---- the service ---------------------------------------------------------------------------------------------

export interface BenchService {
  url: string;
  child: Child;
  pid: number;
  /**
   * Started with `inspectOnSignal`: activates the V8 inspector now (SIGUSR1, 127.0.0.1, a free port) and
   * resolves with its WebSocket URL. Until then the process runs without an inspector.
   */
  activateInspector(): Promise<string>;
  stop(): Promise<void>;
}

export interface ServiceOptions {
  redisUrl: string;
  fakeUrl: string;
  env?: Record<string, string>;
  /** Write a V8 CPU profile (`--cpu-prof`) into this directory when the process exits. */
  cpuProfDir?: string | undefined;
  /** Let SIGUSR1 open the V8 inspector on 127.0.0.1 (a free port), to force a GC and read the heap (B6). */
  inspectOnSignal?: boolean | undefined;
}

function startScript(): string[] {
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    scripts: { start: string };
  };
  return pkg.scripts.start.trim().split(/\s+/);
}

/**
 * The node flags of `npm start` (package.json's start script): the service runs here with the runtime flags it has in
 * production. An experiment's knob: BENCH_SERVICE_NODE_FLAGS, when set (even empty), replaces them, e.g.
 * `BENCH_SERVICE_NODE_FLAGS='--max-semi-space-size=16' npm run bench -- --only B6` (V8 flags such as
 * `--heap-growing-percent` are not allowed in NODE_OPTIONS, and an absent flag cannot be set there).
 */
function startFlags(): string[] {
  const override = process.env['BENCH_SERVICE_NODE_FLAGS'];
  if (override !== undefined) return override.split(/\s+/).filter(Boolean);
  return startScript().filter((t) => t.startsWith('--'));
}

/**
 * The environment `npm start` sets before it execs node (`NAME=${NAME:-default}` or `NAME=value`, e.g.
 * MALLOC_ARENA_MAX), resolved against this process's environment as the shell would.
 */
function startEnv(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const t of startScript()) {
    const m = /^([A-Z_]+)=(?:\$\{\1:-(.*)\}|(.*))$/.exec(t);
    if (!m) break;
    out[m[1]!] = m[2] !== undefined ? process.env[m[1]!] || m[2] : m[3]!;
  }
  return out;
}

/** The service as its own process: `node src/server.js` (compiled, as `npm start` runs it) with PORT=0 on 127.0.0.1. */
export async function startService(opts: ServiceOptions): Promise<BenchService> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of ['API_KEYS', 'REDIS_CLUSTER_NODES', 'NODE_OPTIONS']) delete env[k];
  Object.assign(env, startEnv(), {
    PORT: '0',
    HOST: '127.0.0.1',
    REDIS_URL: opts.redisUrl,
    ANTHROPIC_API_KEY: 'bench-key',
    ANTHROPIC_BASE_URL: opts.fakeUrl,
    // info: the "Server listening at …" line gives the port; the service logs no line per request at info.
    LOG_LEVEL: 'info',
    // One tenant drives the whole load: the per-tenant rate limit and quotas (on by default) are off here.
    RATE_LIMIT_PER_MIN: '0',
    TENANT_MAX_SESSIONS: '0',
    TENANT_MAX_WEBSOCKETS: '0',
    TENANT_MAX_ACTIVE_RUNS: '0',
    // An experiment's knob: extra node options for the service only (e.g. V8 heap flags).
    ...(process.env['BENCH_SERVICE_NODE_OPTIONS']
      ? { NODE_OPTIONS: process.env['BENCH_SERVICE_NODE_OPTIONS'] }
      : {}),
    ...opts.env,
  });
  const nodeArgs = [
    ...startFlags(),
    ...(opts.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfDir] : []),
    ...(opts.inspectOnSignal ? ['--inspect-port=127.0.0.1:0'] : []),
  ];
  // An experiment's knob: BENCH_SERVICE_GC_LOG=<file> runs the service with `--trace-gc` and appends its GC lines there.
  const gcLog = process.env['BENCH_SERVICE_GC_LOG'];
  if (gcLog) nodeArgs.push('--trace-gc');
  const child = spawnNode('src/server.ts', [], { env, nodeArgs });
  if (gcLog) {
    appendFileSync(gcLog, `# service pid ${child.pid} started ${new Date().toISOString()}\n`);
    let rest = '';
    child.child.stdout?.on('data', (chunk: Buffer) => {
      const all = (rest + chunk.toString('utf8')).split('\n');
      rest = all.pop() ?? '';
      const lines = all.filter((l) => /^\[\d+:0x/.test(l));
      if (lines.length) appendFileSync(gcLog, lines.join('\n') + '\n');
    });
  }
  const m = await child.waitFor(/Server listening at (http:\/\/127\.0\.0\.1:\d+)/, 60_000, 'the service');
  let inspector: Promise<string> | null = null;
  return {
    url: m[1]!,
    child,
    pid: child.pid,
    stop: () => child.stop('SIGTERM', 30_000),
    activateInspector: () => {
      if (!opts.inspectOnSignal) return Promise.reject(new Error('started without inspectOnSignal'));
      if (!inspector) {
        const wait = child.waitFor(
          /Debugger listening on (ws:\/\/127\.0\.0\.1:\d+\/[\w-]+)/,
          30_000,
          'the inspector',
        );
        child.child.kill('SIGUSR1');
        inspector = wait.then((r) => r[1]!);
      }
      return inspector;
    },
  };
}

// ---- memory of a process -------------------------------------------------------------------------------------

/** VmRSS / VmHWM of a process in bytes (Linux /proc). */
export function procMemory(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

/** CPU time (user + system, ms) a process has used so far (Linux /proc, clock ticks of 10 ms). */
export function procCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may contain spaces) start after the last ')'.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** CPU used meanwhile by each process of `pids` (ms), and by this process. */
export function cpuMeter(pids: Record<string, number>) {
  const start = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, procCpuMs(pid)]));
  const self = process.cpuUsage();
  return (): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const [k, pid] of Object.entries(pids)) {
      try {
        out[k] = procCpuMs(pid) - start[k]!;
      } catch {
        out[k] = NaN;
      }
    }
    const u = process.cpuUsage(self);
    out['bench'] = (u.user + u.system) / 1000;
    return out;
  };
}

/** Resets the peak RSS (VmHWM) of a process we own: `echo 5 > /proc/<pid>/clear_refs`. False when not allowed. */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/**
 * Samples a process's RSS every `intervalMs` (and resets its VmHWM at start), so a peak is known even where the
 * kernel's high-water mark cannot be reset.
 */
export class RssSampler {
  private timer: NodeJS.Timeout | null = null;
  readonly start: number;
  peak: number;
  private hwmReset: boolean;

  constructor(
    readonly pid: number,
    intervalMs = 50,
  ) {
    this.hwmReset = resetPeakRss(pid);
    this.start = procMemory(pid).rss;
    this.peak = this.start;
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  private sample(): void {
    try {
      this.peak = Math.max(this.peak, procMemory(this.pid).rss);
    } catch {
      /* exited */
    }
  }

  /** Stops sampling; the peak is the larger of the samples and, if it was reset at start, the kernel's VmHWM. */
  stop(): { start: number; peak: number; end: number } {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    let end = NaN;
    try {
      const m = procMemory(this.pid);
      end = m.rss;
      this.peak = Math.max(this.peak, m.rss, this.hwmReset ? m.hwm : 0);
    } catch {
      /* exited */
    }
    return { start: this.start, peak: this.peak, end };
  }
}

/** Waits for a process's RSS to stop moving (two readings `gapMs` apart within 1 MB), up to `maxMs`. */
export async function settledRss(pid: number, gapMs = 500, maxMs = 5_000): Promise<number> {
  let last = procMemory(pid).rss;
  const deadline = Date.now() + maxMs;
  while (Date.now() < deadline) {
    await sleep(gapMs);
    const now = procMemory(pid).rss;
    if (Math.abs(now - last) < 1024 * 1024) return now;
    last = now;
  }
  return last;
}
