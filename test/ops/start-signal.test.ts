/**
 * `npm start` stops as a whole on SIGTERM: npm forwards the signal to the start script, whose `exec` makes the
 * service's node the process that gets it (a `sh -c` in between does not pass it on), and the service stops the
 * embedded redis-server it started. Nothing of the process tree is left.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { ROOT } from '../helpers/openapi.js';
import { buildService } from '../helpers/process.js';

async function freePort(): Promise<number> {
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Every process whose parent chain reaches `root` (read from /proc). */
function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Fields after the command (which may hold spaces and parentheses): state, ppid, …
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parent.set(Number(entry), ppid);
    } catch {
      /* gone meanwhile */
    }
  }
  const found: number[] = [];
  for (const pid of parent.keys()) {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) {
      if (p === root) {
        found.push(pid);
        break;
      }
    }
  }
  return found;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
  } catch {
    return false;
  }
};

test('SIGTERM to `npm start` leaves no process behind, embedded redis-server included', async () => {
  buildService();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'trs-start-'));
  const port = await freePort();
  const npm = spawn('npm', ['start', '--ignore-scripts'], {
    cwd: ROOT,
    env: {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      HOME: process.env['HOME'] ?? '/tmp',
      PORT: String(port),
      HOST: '127.0.0.1',
      // Nothing answers there: the service starts its own redis-server, which must stop with it.
      LOCAL_REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
      DATA_DIR: dataDir,
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  for (const s of [npm.stdout, npm.stderr]) s.on('data', (d: Buffer) => (output += d.toString()));
  let tree: number[] = [];
  try {
    // Ready once the service logs that it listens (its log line names the address).
    while (!output.includes(`127.0.0.1:${port}`)) {
      if (npm.exitCode !== null) assert.fail(`npm start exited early:\n${output}`);
      await once(npm.stdout, 'data');
    }
    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    assert.equal(health.status, 200);
    tree = descendants(npm.pid!);
    const commands = tree.map((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' '));
    assert.ok(
      commands.some((c) => c.includes('redis-server')),
      `an embedded redis-server runs: ${commands.join(' | ')}`,
    );
    assert.ok(
      !commands.some((c) => /^(\/bin\/)?sh -c/.test(c)),
      `no shell stays between npm and node: ${commands}`,
    );
    npm.kill('SIGTERM');
    const [code, signal] = (await once(npm, 'exit')) as [number | null, string | null];
    assert.ok(code !== null || signal !== null);
    // The processes are not this test's children: wait (bounded) for each to be gone.
    const deadline = Date.now() + 20_000;
    while (tree.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(
      tree.filter(alive),
      [],
      `left running after SIGTERM to npm start:\n${output.split('\n').slice(-10).join('\n')}`,
    );
  } finally {
    for (const pid of [npm.pid!, ...tree]) if (alive(pid)) process.kill(pid, 'SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
});
