import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The service as a separate OS process (`node --import tsx src/server.ts`), for tests that kill it like a crash
 * would. Its URL comes from pino's "Server listening at …" line, so it needs LOG_LEVEL=info (set here) and PORT=0.
 */
export interface ChildService {
  url: string;
  pid: number;
  child: ChildProcess;
  /** What the process printed so far (stdout and stderr), for failure messages. */
  output(): string;
  /** Sends `signal` (default SIGKILL) to this process only and resolves once it has exited. */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const c of live) {
      try {
        if (c.pid !== undefined) process.kill(c.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });
}

export async function spawnService(env: Record<string, string>, timeoutMs = 30_000): Promise<ChildService> {
  installExitHook();
  const childEnv: NodeJS.ProcessEnv = { ...process.env };
  for (const k of [
    'API_KEYS',
    'REDIS_URL',
    'REDIS_CLUSTER_NODES',
    'ANTHROPIC_API_KEY',
    'ANTHROPIC_BASE_URL',
  ]) {
    delete childEnv[k];
  }
  Object.assign(childEnv, { PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env });
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    cwd: ROOT,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => live.delete(child));
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`service did not start in ${timeoutMs} ms:\n${out}`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`service exited (${code ?? signal}) before listening:\n${out}`));
    });
  });
  return {
    url,
    pid: child.pid!,
    child,
    output: () => out,
    kill: async (signal: NodeJS.Signals = 'SIGKILL') => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      await exited;
    },
  };
}
