import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { Redis } from 'ioredis';

/**
 * Running `redis-server` as a child process: for a self-contained single-machine deployment (`startEmbeddedRedis`)
 * and for tests (`launchRedisServer`, used by test/helpers/redis.ts). Always bound to 127.0.0.1.
 */

/** pino-compatible: `logger.info({ port }, 'message')`. */
export interface EmbeddedRedisLogger {
  info(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
  error(obj: Record<string, unknown>, msg: string): void;
}

export interface EmbeddedRedis {
  url: string;
  port: number;
  stop(): Promise<void>;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface RedisServerProcess {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  /** Resolves once the process has exited (never rejects). */
  readonly exited: Promise<ExitInfo>;
  /** Whether the process is still running. */
  running(): boolean;
  /** SIGTERM (redis flushes its AOF and exits), then SIGKILL if it has not exited after `timeoutMs`. */
  stop(timeoutMs?: number): Promise<void>;
  /** SIGKILL, as a crash would; resolves when the process is gone. */
  kill(): Promise<void>;
  /** The last lines the process printed (stdout and stderr interleaved). */
  output(): string[];
}

export interface LaunchRedisOptions {
  port: number;
  /** Extra redis-server arguments (`--appendonly yes` …); `--port`, `--bind` and `--daemonize no` are always set. */
  args?: readonly string[];
  /** Working directory of the process (relative `--dir`/config paths resolve against it). */
  cwd?: string;
  /** The redis-server binary; found with {@link findRedisServerBinary} when not given. */
  binary?: string;
  /** How long to wait for the server to answer PING. Default 10 s. */
  readyTimeoutMs?: number;
  logger?: EmbeddedRedisLogger;
}

const READY_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 10_000;
const OUTPUT_LINES = 30;
const FALLBACK_BINARIES = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'];

function isExecutableFile(file: string): boolean {
  try {
    if (!statSync(file).isFile()) return false;
    accessSync(file, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `name` on PATH, else the first of `fallbacks` that is an executable file. */
export function findExecutable(name: string, fallbacks: readonly string[] = []): string | null {
  for (const dir of (process.env['PATH'] ?? '').split(path.delimiter)) {
    if (dir === '') continue;
    const candidate = path.join(dir, name);
    if (isExecutableFile(candidate)) return candidate;
  }
  return fallbacks.find(isExecutableFile) ?? null;
}

/** The `redis-server` binary: on PATH, or at /usr/bin/redis-server or /usr/local/bin/redis-server. */
export function findRedisServerBinary(): string | null {
  return findExecutable('redis-server', FALLBACK_BINARIES);
}

/** A TCP port on 127.0.0.1 that was free a moment ago: bind port 0, read the port, close. */
export async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close((err) => {
        if (err) reject(err);
        else if (port > 0) resolve(port);
        else reject(new Error('Could not determine a free port'));
      });
    });
  });
}

/**
 * Whether a Redis server at `url` answers PING within `timeoutMs`. Never throws; the connection is always closed.
 */
export async function redisAnswers(url: string, timeoutMs: number): Promise<boolean> {
  return (await probeRedis(url, timeoutMs, false)) !== null;
}

/**
 * PING (and, with `withPid`, `INFO server`) within `timeoutMs`: `null` when it does not answer, else the server's
 * `process_id` (0 without `withPid`). Never throws; the connection is always closed.
 */
async function probeRedis(url: string, timeoutMs: number, withPid: boolean): Promise<number | null> {
  const client = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    enableReadyCheck: false,
    retryStrategy: () => null,
    reconnectOnError: () => false,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
  });
  client.on('error', () => {
    // Reported through the rejected connect/ping below.
  });
  let timer: NodeJS.Timeout | undefined;
  try {
    const attempt = (async (): Promise<number | null> => {
      await client.connect();
      if ((await client.ping()) !== 'PONG') return null;
      if (!withPid) return 0;
      const match = /^process_id:(\d+)/m.exec(await client.info('server'));
      return match?.[1] !== undefined ? Number(match[1]) : null;
    })().catch(() => null);
    const timeout = new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), timeoutMs);
    });
    return await Promise.race([attempt, timeout]);
  } finally {
    if (timer) clearTimeout(timer);
    client.disconnect();
  }
}

// Children still running when this process exits are killed (SIGKILL) from one shared 'exit' handler.
const liveChildren = new Set<ChildProcess>();
let exitHandlerInstalled = false;

function track(child: ChildProcess): void {
  liveChildren.add(child);
  if (!exitHandlerInstalled) {
    exitHandlerInstalled = true;
    process.on('exit', () => {
      for (const c of liveChildren) {
        try {
          c.kill('SIGKILL');
        } catch {
          // already gone
        }
      }
    });
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Raised when redis-server exits or does not answer in time; `output` holds its last lines. */
export class RedisStartError extends Error {
  readonly output: string[];
  constructor(message: string, output: string[]) {
    const tail = output.length > 0 ? `\n--- last redis-server output ---\n${output.join('\n')}` : '';
    super(`${message}${tail}`);
    this.name = 'RedisStartError';
    this.output = output;
  }
}

/** Keeps the last {@link OUTPUT_LINES} non-empty lines the child writes to stdout and stderr. */
function collectOutput(child: ChildProcess): string[] {
  const lines: string[] = [];
  const collect = (stream: NodeJS.ReadableStream | null): void => {
    if (!stream) return;
    let partial = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const parts = (partial + chunk).split('\n');
      partial = parts.pop() ?? '';
      for (const line of parts) {
        if (line.trim() === '') continue;
        lines.push(line);
        if (lines.length > OUTPUT_LINES) lines.shift();
      }
    });
  };
  collect(child.stdout);
  collect(child.stderr);
  return lines;
}

/** The child's life: whether it runs, its exit, and stopping it (SIGTERM, then SIGKILL after `timeoutMs`). */
function superviseChild(
  child: ChildProcess,
  lines: string[],
  port: number,
  logger: EmbeddedRedisLogger | undefined,
): Pick<RedisServerProcess, 'exited' | 'running' | 'stop' | 'kill'> & { exitInfo: () => ExitInfo | null } {
  const state: { exit: ExitInfo | null } = { exit: null };
  const exited = new Promise<ExitInfo>((resolve) => {
    const done = (info: ExitInfo): void => {
      if (state.exit) return;
      state.exit = info;
      liveChildren.delete(child);
      resolve(info);
    };
    child.once('exit', (code, signal) => done({ code, signal }));
    child.once('error', (err) => {
      lines.push(`spawn error: ${err.message}`);
      done({ code: null, signal: null });
    });
  });

  const running = (): boolean => state.exit === null;
  const waitExit = async (ms: number): Promise<boolean> => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    try {
      return await Promise.race([exited.then(() => true), timeout]);
    } finally {
      clearTimeout(timer);
    }
  };
  const kill = async (): Promise<void> => {
    if (!running()) return;
    child.kill('SIGKILL');
    await exited;
  };
  const stop = async (timeoutMs = STOP_TIMEOUT_MS): Promise<void> => {
    if (!running()) return;
    child.kill('SIGTERM');
    if (!(await waitExit(timeoutMs))) {
      logger?.warn({ port, pid: child.pid }, 'redis-server did not exit after SIGTERM; killing it');
      await kill();
    }
  };
  return { exited, running, stop, kill, exitInfo: () => state.exit };
}

/**
 * Starts `redis-server` on 127.0.0.1:`port` and waits until it answers PING. Rejects with a {@link RedisStartError}
 * (including its last output lines) when it exits early or does not answer within `readyTimeoutMs`.
 */
export async function launchRedisServer(opts: LaunchRedisOptions): Promise<RedisServerProcess> {
  const binary = opts.binary ?? findRedisServerBinary();
  if (binary === null) {
    throw new Error(
      'redis-server not found on PATH, /usr/bin or /usr/local/bin; install it (Debian: apt-get install redis-server)',
    );
  }
  const { port } = opts;
  const url = `redis://127.0.0.1:${port}`;
  const args = [...(opts.args ?? []), '--port', String(port), '--bind', '127.0.0.1', '--daemonize', 'no'];
  const child = spawn(binary, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(opts.cwd !== undefined ? { cwd: opts.cwd } : {}),
  });
  track(child);
  const lines = collectOutput(child);
  const life = superviseChild(child, lines, port, opts.logger);

  const readyTimeoutMs = opts.readyTimeoutMs ?? READY_TIMEOUT_MS;
  const deadline = Date.now() + readyTimeoutMs;
  let foreignNoted = false;
  while (true) {
    if (!life.running()) {
      const info = life.exitInfo();
      throw new RedisStartError(
        `redis-server on port ${port} exited before answering PING (code ${info?.code ?? 'none'}, signal ${
          info?.signal ?? 'none'
        })`,
        [...lines],
      );
    }
    // The server must be *our* child: with a taken port, PING would be answered by whoever holds it.
    const pid = await probeRedis(url, 500, true);
    if (pid !== null && pid === child.pid) break;
    if (pid !== null && !foreignNoted) {
      foreignNoted = true;
      lines.push(`port ${port} is answered by another redis-server (pid ${pid})`);
    }
    if (Date.now() >= deadline) {
      const output = [...lines];
      await life.kill();
      throw new RedisStartError(
        `redis-server on port ${port} did not answer PING within ${readyTimeoutMs} ms`,
        output,
      );
    }
    await delay(50);
  }

  const { exited, running, stop, kill } = life;
  return { url, port, pid: child.pid ?? -1, exited, running, stop, kill, output: () => [...lines] };
}

/**
 * Starts a `redis-server` child process on 127.0.0.1 that keeps its data in `dataDir` (AOF, no RDB snapshots), and
 * resolves once it answers PING. Without `port` a free one is picked (retried if another process takes it first).
 * The child is killed if this process exits; `stop()` shuts it down cleanly.
 */
export async function startEmbeddedRedis(opts: {
  dataDir: string;
  port?: number;
  logger?: EmbeddedRedisLogger;
}): Promise<EmbeddedRedis> {
  const dataDir = path.resolve(opts.dataDir);
  await mkdir(dataDir, { recursive: true });
  const args = ['--appendonly', 'yes', '--dir', dataDir, '--save', ''];
  const attempts = opts.port === undefined ? 3 : 1;
  for (let attempt = 1; ; attempt += 1) {
    const port = opts.port ?? (await freeLoopbackPort());
    try {
      const server = await launchRedisServer({
        port,
        args,
        ...(opts.logger !== undefined ? { logger: opts.logger } : {}),
      });
      opts.logger?.info({ port, pid: server.pid, dataDir }, 'embedded redis-server started');
      return {
        url: server.url,
        port: server.port,
        stop: async () => {
          await server.stop();
          opts.logger?.info({ port }, 'embedded redis-server stopped');
        },
      };
    } catch (err) {
      const portTaken =
        err instanceof RedisStartError && err.output.some((l) => /address already in use/i.test(l));
      if (portTaken && attempt < attempts) {
        opts.logger?.warn({ port, attempt }, 'port was taken before redis-server bound it; trying another');
        continue;
      }
      opts.logger?.error(
        { port, err: err instanceof Error ? err.message : String(err) },
        'embedded redis failed',
      );
      throw err;
    }
  }
}
