/** What every scenario gets: the shared processes, the mode, and ways to start the processes it owns. */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { createInterface } from 'node:readline';
import { FakeControl } from './fake.js';
import {
  spawnNode,
  startService,
  type BenchFake,
  type BenchRedis,
  type BenchService,
  type Child,
} from './procs.js';
import { withTimeout } from './util.js';

export interface Ctx {
  quick: boolean;
  redis: BenchRedis;
  fake: BenchFake;
  fakeCtl: FakeControl;
  /** Directory for CPU profiles and scratch files. */
  tmpDir: string;
  /** How clients follow a session: the WebSocket route, or polling while that route does not exist. */
  follow: 'ws' | 'poll';
  log(msg: string): void;
  /** Starts a fresh service process on the shared Redis and fake (optionally under `--cpu-prof`). */
  service(env?: Record<string, string>, cpuProfDir?: string): Promise<BenchService>;
  /** The same with every option of procs.ts's `startService` (e.g. the inspector). */
  startService(opts: {
    env?: Record<string, string>;
    cpuProfDir?: string;
    inspectOnSignal?: boolean;
  }): Promise<BenchService>;
  /** Per-event delay of the fake for the tool-loop scenarios (B1, B2): 8 events per turn, so 20 ms per turn. */
  turnEventDelayMs: number;
  /** Median in-process iteration time at that pacing (set by B1; B2 measures it itself when B1 did not run). */
  baselineIterationMs?: number;
}

/** Runs `work` against a fresh service (extra `env`) under the CPU profiler; see run.ts. */
export type Profiled = (
  env: Record<string, string>,
  work: (svc: BenchService) => Promise<void>,
) => Promise<void>;

export function serviceStarter(redis: BenchRedis, fake: BenchFake) {
  return (opts: {
    env?: Record<string, string>;
    cpuProfDir?: string | undefined;
    inspectOnSignal?: boolean;
  }) => startService({ redisUrl: redis.url, fakeUrl: fake.url, ...opts });
}

export interface InprocResult {
  id: number;
  ok: boolean;
  walls: number[];
  upstreamMs: number[];
  betweenMs: number[];
  iterations: number;
  t0: number;
  t1: number;
  errors: string[];
  errorCount: number;
  /** `paced` only: text-delta lateness from the fake's schedule (ms), and this process's event-loop delay (ms). */
  lateness?: { p50: number; p99: number; max: number; count: number };
  eventLoop?: { p99: number; max: number };
}

/** The in-process SDK tool runner (bench/inproc.ts) as a worker process. */
export class InprocWorker {
  private seq = 0;
  private waiting = new Map<number, (r: InprocResult) => void>();

  private constructor(
    readonly child: Child,
    /** The port of its WebSocket server (the relaying peer of B9). */
    readonly wsPort: number,
  ) {
    const rl = createInterface({ input: child.child.stdout! });
    rl.on('line', (line) => {
      if (!line.startsWith('{')) return;
      const msg = JSON.parse(line);
      const resolve = this.waiting.get(msg.id);
      if (resolve) {
        this.waiting.delete(msg.id);
        resolve(msg as InprocResult);
      }
    });
  }

  static async start(fakeUrl: string): Promise<InprocWorker> {
    const child = spawnNode('bench/inproc.ts', [fakeUrl], { stdin: true });
    const ready = await child.waitFor(
      /\{"ready":true,"wsPort":(\d+)\}/,
      30_000,
      'the in-process runner worker',
    );
    return new InprocWorker(child, Number(ready[1]));
  }

  get pid(): number {
    return this.child.pid;
  }

  run(count: number, tagPrefix: string, maxIterations: number, timeoutMs: number): Promise<InprocResult> {
    const id = ++this.seq;
    const p = new Promise<InprocResult>((resolve) => this.waiting.set(id, resolve));
    this.child.child.stdin!.write(`${JSON.stringify({ op: 'run', id, count, tagPrefix, maxIterations })}\n`);
    return withTimeout(p, timeoutMs, `in-process runs ${tagPrefix}`);
  }

  /** B9: `count` runners of the fake's `paced` script, started spread over `staggerMs`. */
  paced(
    count: number,
    tagPrefix: string,
    opts: { staggerMs: number; eventDelayMs: number; timeoutMs: number },
  ): Promise<InprocResult> {
    const id = ++this.seq;
    const p = new Promise<InprocResult>((resolve) => this.waiting.set(id, resolve));
    const { timeoutMs, ...rest } = opts;
    const cmd = { op: 'paced', id, count, tagPrefix, maxIterations: 10, ...rest };
    this.child.child.stdin!.write(`${JSON.stringify(cmd)}\n`);
    return withTimeout(p, timeoutMs, `in-process paced runs ${tagPrefix}`);
  }

  /**
   * B9's relaying peer: resolves once `count` runs opened over the worker's WebSocket server with tags of
   * `tagPrefix` ended (send it before the clients connect: the event-loop window starts with it).
   */
  relayed(count: number, tagPrefix: string, timeoutMs: number): Promise<InprocResult> {
    const id = ++this.seq;
    const p = new Promise<InprocResult>((resolve) => this.waiting.set(id, resolve));
    this.child.child.stdin!.write(
      `${JSON.stringify({ op: 'relayed', id, count, tagPrefix, maxIterations: 10 })}\n`,
    );
    return withTimeout(p, timeoutMs, `in-process relayed runs ${tagPrefix}`);
  }

  stop(): Promise<void> {
    this.child.child.stdin!.end();
    return this.child.stop();
  }
}

export interface Machine {
  cpu: string;
  cores: number;
  ramGb: number;
  node: string;
  redis: string;
  os: string;
  date: string;
  openFiles: string;
}

export async function machine(redis: BenchRedis): Promise<Machine> {
  let cpu = os.cpus()[0]?.model ?? 'unknown';
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) cpu = m[1]!.trim();
  } catch {
    /* not Linux */
  }
  const info = await redis.admin.info('server');
  let openFiles = 'unknown';
  try {
    const limits = readFileSync('/proc/self/limits', 'utf8');
    const m = /^Max open files\s+(\S+)\s+(\S+)/m.exec(limits);
    if (m) openFiles = `${m[1]} (hard ${m[2]})`;
  } catch {
    /* not Linux */
  }
  return {
    cpu,
    cores: os.availableParallelism?.() ?? os.cpus().length,
    ramGb: os.totalmem() / 1024 ** 3,
    node: process.version,
    redis: /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown',
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    date: new Date().toISOString(),
    openFiles,
  };
}
