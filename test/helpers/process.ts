import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { after } from 'node:test';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AnswerLog } from './declared-statuses.js';
import { Api } from './service.js';

/**
 * Service processes for the durability tests: `node --import tsx src/server.ts` as a child process on a loopback port,
 * so a test can SIGKILL it mid-turn, SIGTERM it, and start it again, as an orchestrator would.
 */

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const LISTENING = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/;
const MAX_LINES = 2000;

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ServiceProcess {
  readonly name: string;
  readonly pid: number;
  /** `http://127.0.0.1:PORT`, parsed from the "Server listening at …" log line. */
  readonly url: string;
  readonly api: Api;
  /** Resolves once the process has exited (never rejects). */
  readonly exited: Promise<ExitInfo>;
  running(): boolean;
  /** The JSON log lines it printed so far (parsed when possible). */
  logs(): Array<Record<string, any>>;
  /** The lines it printed that name a top-level key twice (a parser keeps one of them, or refuses the line). */
  duplicateKeyLines(): string[];
  /** Resolves with the first log line (already printed or to come) that `pred` accepts. */
  waitForLog(pred: (line: Record<string, any>) => boolean, timeoutMs?: number): Promise<Record<string, any>>;
  /**
   * Every (method, route, status) of its access-log lines (at LOG_LEVEL info or below); the file fails after its
   * last test when openapi.json does not declare one (test/helpers/declared-statuses.ts).
   */
  readonly answers: AnswerLog;
  /** SIGKILL, like a crash; resolves once it is gone. */
  kill(): Promise<ExitInfo>;
  /** SIGTERM (graceful shutdown); SIGKILL after `timeoutMs`. Resolves once it is gone. */
  stop(timeoutMs?: number): Promise<ExitInfo>;
  /** SIGSTOP: the process freezes (a long GC pause, a stalled VM) while its sockets stay open. */
  pause(): void;
  /** SIGCONT after `pause()`. */
  resume(): void;
}

const children = new Set<ChildProcess>();
let exitHandlerInstalled = false;

// A child still running after the file's last test (a `before` that failed half-way through starting several, a test
// that threw before its cleanup) would keep this process's event loop alive through its pipes, so the file never
// ends (seen in CI: a replica that failed to start left its two siblings serving for 83 minutes, past CI's limit).
// A root `after` hook runs once every test and hook of the file is done.
after(() => {
  for (const c of children) c.kill('SIGKILL');
});

function track(child: ChildProcess): void {
  children.add(child);
  child.once('exit', () => children.delete(child));
  if (exitHandlerInstalled) return;
  exitHandlerInstalled = true;
  process.on('exit', () => {
    for (const c of children) c.kill('SIGKILL');
  });
}

export interface SpawnOptions {
  /** A name for messages and logs. */
  name?: string;
  /** How long to wait for "Server listening at" (default 60 s: tsx compiles on start; CI machines are busy). */
  readyTimeoutMs?: number;
  /** Echo the child's output to this process's stderr (debugging). */
  echo?: boolean;
  /**
   * Run the compiled JavaScript with package.json's `start` command (`node dist/src/server.js`) instead of the
   * TypeScript sources through tsx. Call `buildService()` first.
   */
  built?: boolean;
  /** Node options before the entry (`--cpu-prof`, `--import` of a probe such as ./loop-probe.ts). */
  nodeArgs?: string[];
}

/** Builds the service as `npm start`'s prestart step does (`npm run build`: tsc into dist/, plus the Lua files). */
export function buildService(): void {
  const out = spawnSync('npm', ['run', 'build'], { cwd: ROOT, encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`build failed: ${out.stdout}${out.stderr}`);
}

/**
 * package.json's start command: the environment it sets before it execs node (`NAME=${NAME:-default}` or
 * `NAME=value`, resolved as the shell would against this process's environment) and the argv after `node` (its
 * `exec`, which hands npm's signals to node, dropped).
 */
function startCommand(): { env: Record<string, string>; args: string[] } {
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    scripts: { start: string };
  };
  const words = pkg.scripts.start.trim().split(/\s+/);
  const env: Record<string, string> = {};
  for (let m; (m = /^([A-Z_]+)=(?:\$\{\1:-(.*)\}|(.*))$/.exec(words[0] ?? '')); words.shift())
    env[m[1]!] = m[3] ?? process.env[m[1]!] ?? m[2] ?? '';
  if (words[0] === 'exec') words.shift();
  if (words[0] !== 'node') throw new Error(`the start script does not run node: ${pkg.scripts.start}`);
  return { env, args: words.slice(1) };
}

/** The node flags of package.json's start command (heap sizing: `--max-semi-space-size`, …), without its entry. */
export const startFlags = (): string[] => startCommand().args.slice(0, -1);

/**
 * Starts the service as a child process. The environment is minimal (PATH, HOME) plus the defaults below plus `env`:
 * nothing of the test process's own environment leaks in (no REDIS_URL of the machine, no API keys).
 */
export async function spawnService(
  env: Record<string, string>,
  opts: SpawnOptions = {},
): Promise<ServiceProcess> {
  const name = opts.name ?? 'service';
  const start = opts.built ? startCommand() : { env: {}, args: ['--import', 'tsx', 'src/server.ts'] };
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), ...start.args], {
    cwd: ROOT,
    env: {
      ...start.env,
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      HOME: process.env['HOME'] ?? '/tmp',
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      ANTHROPIC_API_KEY: 'x',
      // The per-tenant rate limit is on by default; tests that check it set it themselves.
      RATE_LIMIT_PER_MIN: '0',
      // Tests read keys by their unprefixed names; test/store/redis-prefix.test.ts covers REDIS_KEY_PREFIX.
      REDIS_KEY_PREFIX: 'none',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  track(child);
  const lines: Array<Record<string, any>> = [];
  const answers = new AnswerLog(`service process ${name}`);
  const watchers = new Set<{ pred: (l: Record<string, any>) => boolean; resolve: (l: any) => void }>();
  const duplicated: string[] = [];
  const onLine = (raw: string) => {
    if (!raw.trim()) return;
    if (duplicateKeys(raw).length > 0 && duplicated.length < 100) duplicated.push(raw);
    let line: Record<string, any>;
    try {
      line = JSON.parse(raw);
      if (typeof line !== 'object' || line === null) line = { msg: raw };
    } catch {
      line = { msg: raw };
    }
    lines.push(line);
    answers.addLogLine(line);
    if (lines.length > MAX_LINES) lines.splice(0, lines.length - MAX_LINES);
    if (opts.echo) process.stderr.write(`[${name}] ${raw}\n`);
    for (const w of watchers) {
      if (w.pred(line)) {
        watchers.delete(w);
        w.resolve(line);
      }
    }
  };
  for (const stream of [child.stdout!, child.stderr!]) {
    let buf = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        onLine(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    });
  }
  let exitInfo: ExitInfo | null = null;
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('exit', (code, signal) => {
      exitInfo = { code, signal };
      resolve(exitInfo);
    });
  });

  const waitForLog = (pred: (l: Record<string, any>) => boolean, timeoutMs = 10_000) => {
    const found = lines.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise<Record<string, any>>((resolve, reject) => {
      const w = {
        pred,
        resolve: (l: Record<string, any>) => {
          clearTimeout(timer);
          resolve(l);
        },
      };
      const timer = setTimeout(() => {
        watchers.delete(w);
        reject(new Error(`${name}: no matching log line within ${timeoutMs} ms`));
      }, timeoutMs);
      watchers.add(w);
    });
  };

  const readyTimeoutMs = opts.readyTimeoutMs ?? 60_000;
  let url: string;
  try {
    const line = await Promise.race([
      waitForLog((l) => LISTENING.test(String(l['msg'] ?? '')), readyTimeoutMs),
      exited.then((e) => {
        throw new Error(`exited (${e.code ?? e.signal}) before listening`);
      }),
    ]);
    url = LISTENING.exec(String(line['msg']))![1]!;
  } catch (err) {
    child.kill('SIGKILL');
    const tail = lines
      .slice(-20)
      .map((l) => JSON.stringify(l))
      .join('\n');
    throw new Error(`${name} did not start: ${(err as Error).message}\n${tail}`, { cause: err });
  }

  const signalAndWait = async (signal: NodeJS.Signals, killAfterMs?: number): Promise<ExitInfo> => {
    if (exitInfo) return exitInfo;
    child.kill(signal);
    if (killAfterMs === undefined) return exited;
    let timer: NodeJS.Timeout | undefined;
    const res = await Promise.race([
      exited,
      new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), killAfterMs))),
    ]);
    clearTimeout(timer);
    if (res) return res;
    child.kill('SIGKILL');
    return exited;
  };

  return {
    name,
    pid: child.pid!,
    url,
    api: new Api(url),
    exited,
    running: () => exitInfo === null,
    logs: () => [...lines],
    answers,
    waitForLog,
    duplicateKeyLines: () => [...duplicated],
    kill: () => signalAndWait('SIGKILL'),
    stop: (timeoutMs = 30_000) => signalAndWait('SIGTERM', timeoutMs),
    pause: () => void child.kill('SIGSTOP'),
    resume: () => void child.kill('SIGCONT'),
  };
}

/** Environment of a service process on `redisUrl` with `fakeUrl` as the upstream. */
export function serviceEnv(redisUrl: string, fakeUrl: string, extra: Record<string, string> = {}) {
  return {
    REDIS_URL: redisUrl,
    ANTHROPIC_BASE_URL: fakeUrl,
    LEASE_TTL_MS: '2000',
    SHUTDOWN_GRACE_MS: '2000',
    UPSTREAM_MAX_RETRIES: '1',
    ...extra,
  };
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The keys a JSON object's text names more than once at its top level (pino writes what it is given: a child
 * logger's bindings and a line's own fields can repeat one). Strings are skipped whole, escapes included.
 */
function duplicateKeys(raw: string): string[] {
  const seen = new Set<string>();
  const dup: string[] = [];
  let depth = 0;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (c === '"') {
      let j = i + 1;
      while (j < raw.length && raw[j] !== '"') j += raw[j] === '\\' ? 2 : 1;
      let k = j + 1;
      while (raw[k] === ' ') k++;
      if (depth === 1 && raw[k] === ':') {
        const key = raw.slice(i + 1, j);
        if (seen.has(key)) dup.push(key);
        else seen.add(key);
      }
      i = j;
    } else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') depth--;
  }
  return dup;
}
