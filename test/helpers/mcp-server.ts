import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The test MCP server (test/fixtures/mcp-server.ts: the MCP SDK's `McpServer` over Streamable HTTP) in its own
 * process on 127.0.0.1, so a test can SIGKILL it mid-call and start it again on the same port.
 */

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface TestMcpServer {
  /** `http://127.0.0.1:PORT/mcp` */
  url: string;
  port: number;
  pid: number;
  /** `{"<tool>:<label>": {started, finished}}`: how often each call ran. */
  calls(): Promise<Record<string, { started: number; finished: number }>>;
  /** How many MCP sessions are open on the server. */
  openSessions(): Promise<number>;
  /**
   * Registers a tool `name` on every MCP session (the server sends `notifications/tools/list_changed`); with `count`,
   * tools `name_0` … `name_<count-1>`; with `describe`, descriptions of that many characters.
   */
  addTool(name: string, opts?: { count?: number; describe?: number }): Promise<void>;
  /** SIGKILL; resolves once it is gone. */
  kill(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

export async function startMcpServer(opts: { port?: number; token?: string } = {}): Promise<TestMcpServer> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/mcp-server.ts'], {
    cwd: ROOT,
    env: {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      MCP_PORT: String(opts.port ?? 0),
      ...(opts.token ? { MCP_TOKEN: opts.token } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => live.delete(child));
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    stderr = (stderr + d).slice(-4000);
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the MCP server did not start: ${stderr}`)), 60_000);
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /listening (http:\/\/127\.0\.0\.1:(\d+)\/mcp)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`the MCP server exited: ${stderr}`));
    });
  });
  const base = url.slice(0, -'/mcp'.length);
  return {
    url,
    port: Number(new URL(url).port),
    pid: child.pid!,
    calls: async () =>
      (await fetch(`${base}/calls`)).json() as Promise<Record<string, { started: number; finished: number }>>,
    openSessions: async () => ((await (await fetch(`${base}/sessions`)).json()) as { open: number }).open,
    addTool: async (name, { count = 0, describe = 0 } = {}) => {
      const q = `name=${encodeURIComponent(name)}&count=${count}&describe=${describe}`;
      const res = await fetch(`${base}/add-tool?${q}`, { method: 'POST' });
      if (!res.ok) throw new Error(`add-tool: ${res.status}`);
    },
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
