/**
 * The Compose deployment on a real Docker engine: builds the image (multi-stage, non-root, health-checked) on local
 * base images, brings docker-compose.yml up, runs a streamed session through the published 127.0.0.1 port (REST +
 * WebSocket), kills the api container's process mid-turn (the restart policy brings it back and the session finishes with a
 * valid history), stops it gracefully mid-run (it uses its SHUTDOWN_GRACE_MS, exits 0, hands the run over), then
 * `down` and `up` again (the sessions are still there: Redis's append-only volume); finally the observability
 * profile's Prometheus (a local stand-in built from Debian's package) comes up and scrapes the api.
 *
 * test/docker/engine.sh provides the engine: a private dockerd (installed from Debian's packages when missing) and
 * local stand-ins for node:24-bookworm-slim and redis:7-alpine, built once per machine (no image registry is
 * reachable here). The first run on a machine builds them (about 2 minutes); later runs reuse them and the image's
 * cached `npm ci` layers.
 *
 * Where Docker cannot run at all (not Linux, not root, no apt-get to install it) the tests are skipped with a loud
 * message; under CI=true they fail instead, since CI runs as root on Debian where Docker works.
 *
 * Over 400 lines: one end-to-end scenario whose steps share the running stack, with the helpers it needs.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const engineScript = path.join(root, 'test/docker/engine.sh');
const project = 'trs-dockertest';
const tenantKey = `k${randomBytes(16).toString('hex')}`;
const redisPassword = randomBytes(18).toString('hex');
/** The test's SHUTDOWN_GRACE_MS (the Compose file's stop_grace_period, 30 s, must exceed it plus 5 s). */
const shutdownGraceMs = 5000;
const isCI = process.env['CI'] === 'true';

/** Why Docker cannot run here at all, or null. Anything else that goes wrong is a failure. */
function cannotRunReason(): string | null {
  if (process.platform !== 'linux') return `not Linux (${process.platform})`;
  if (process.getuid?.() !== 0) return 'not root (the private dockerd and debootstrap need root)';
  return null;
}

function loud(message: string): void {
  const bar = '!'.repeat(100);
  process.stderr.write(`\n${bar}\n!! ${message}\n${bar}\n\n`);
}

interface Engine {
  env: Record<string, string>;
  process: ChildProcessWithoutNullStreams;
  exited: Promise<number | null>;
}

/** Starts test/docker/engine.sh and resolves once it printed its READY line (or rejects with its exit code). */
function startEngine(): Promise<Engine> {
  const child = spawn('bash', [engineScript], { cwd: root, stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.stderr.on('data', (chunk: Buffer) => process.stderr.write(chunk));
  return new Promise((resolve, reject) => {
    let out = '';
    const onData = (chunk: Buffer): void => {
      out += chunk.toString('utf8');
      const line = out.split('\n').find((l) => l.startsWith('READY '));
      if (!line) return;
      child.stdout.off('data', onData);
      const env: Record<string, string> = {};
      for (const pair of line.slice('READY '.length).trim().split(/\s+/)) {
        const at = pair.indexOf('=');
        env[pair.slice(0, at)] = pair.slice(at + 1);
      }
      resolve({ env, process: child, exited });
    };
    child.stdout.on('data', onData);
    void exited.then((code) =>
      reject(Object.assign(new Error(`engine.sh exited with ${code}`), { exitCode: code })),
    );
  });
}

interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

function run(file: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { cwd: root, env, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Polls `check` every `everyMs` until it returns a value other than undefined, or fails after `timeoutMs`. */
async function until<T>(
  what: string,
  timeoutMs: number,
  check: () => Promise<T | undefined>,
  everyMs = 250,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

interface Envelope {
  id: string;
  type: string;
  data: Record<string, unknown>;
}

/** The upgrade answered with an HTTP status instead of 101. */
class UpgradeRefused extends Error {
  constructor(readonly status: number) {
    super(`upgrade refused: ${status}`);
  }
}

/** A WebSocket reader of one session's events that resumes from the last id it saw. */
class EventReader {
  readonly events: Envelope[] = [];
  private socket: WebSocket | undefined;
  private waiters: Array<() => void> = [];
  closed = true;

  constructor(
    private readonly url: string,
    private readonly key: string,
  ) {}

  /** Connections opened after the first. */
  reconnects = 0;
  private opened = false;

  /**
   * Opens the socket, as a client behind the balancer does: a 503 (HAProxy has no replica up for a moment, e.g. while a
   * restarted one passes its first checks) is tried again until `timeoutMs`.
   */
  async connect(timeoutMs = 60_000): Promise<void> {
    if (this.opened) this.reconnects++;
    this.opened = true;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        return await this.open();
      } catch (err) {
        if (!(err instanceof UpgradeRefused) || err.status !== 503 || Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  private async open(): Promise<void> {
    const last = this.events.at(-1)?.id;
    const socket = new WebSocket(last ? `${this.url}?after=${encodeURIComponent(last)}` : this.url, {
      headers: { authorization: `Bearer ${this.key}` },
    });
    this.socket = socket;
    socket.on('message', (raw: Buffer) => {
      const frame = JSON.parse(raw.toString('utf8')) as Envelope;
      if (typeof frame.id === 'string') this.events.push(frame);
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('unexpected-response', (_req, res) => reject(new UpgradeRefused(res.statusCode ?? 0)));
      socket.once('error', reject);
    });
    this.closed = false;
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Resolves with the first event matching `pred` (seen before or later), or rejects when the socket closes first. */
  async waitFor(what: string, pred: (e: Envelope) => boolean, timeoutMs: number): Promise<Envelope> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.find(pred);
      if (found) return found;
      if (this.closed) throw new Error(`the WebSocket closed before ${what}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Resolves when the server closed the socket. */
  async waitClosed(timeoutMs: number): Promise<void> {
    await until('the WebSocket to close', timeoutMs, async () => (this.closed ? true : undefined), 50);
  }

  close(): void {
    this.socket?.close();
  }
}

interface Block {
  type: string;
  id?: string;
  tool_use_id?: string;
  text?: string;
  is_error?: boolean;
}
interface Message {
  role: 'user' | 'assistant';
  content: Block[];
}

/**
 * A finished tool-runner history: starts with the user's question, roles alternate, every tool_use is answered by a
 * tool_result in the next user turn exactly once (and nothing else is), and the last turn is the assistant's, with
 * no tool calls. Returns the number of assistant turns.
 */
function assertValidHistory(messages: Message[], question: string): number {
  assert.ok(messages.length >= 2, 'a question and at least one reply');
  assert.equal(messages[0]?.role, 'user');
  assert.equal(messages[0]?.content.find((b) => b.type === 'text')?.text, question);
  const ids = new Set<string>();
  messages.forEach((message, i) => {
    assert.equal(message.role, i % 2 === 0 ? 'user' : 'assistant', `message ${i} role`);
    if (message.role !== 'assistant') return;
    const calls = message.content.filter((b) => b.type === 'tool_use').map((b) => b.id ?? '');
    for (const id of calls) {
      assert.ok(!ids.has(id), `tool_use id ${id} appears once`);
      ids.add(id);
    }
    const next = messages[i + 1];
    if (!next) {
      assert.deepEqual(calls, [], 'the last assistant turn calls no tools');
      return;
    }
    const answered = next.content.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id ?? '');
    assert.deepEqual(
      [...answered].sort(),
      [...calls].sort(),
      `the tool calls of message ${i} are answered once`,
    );
    for (const result of next.content.filter((b) => b.type === 'tool_result')) {
      assert.notEqual(result.is_error, true, `tool result ${result.tool_use_id} is not an error`);
    }
  });
  assert.equal(messages.at(-1)?.role, 'assistant');
  return messages.filter((m) => m.role === 'assistant').length;
}

const cannot = cannotRunReason();
if (cannot && !isCI) {
  loud(
    `SKIPPING the Docker Compose tests (test/ops/docker-compose.test.ts): Docker cannot run here: ${cannot}`,
  );
}

describe(
  'Docker Compose on a real engine',
  { skip: cannot && !isCI ? `Docker cannot run here: ${cannot}` : false },
  () => {
    let engine: Engine | undefined;
    /** Set when engine.sh says Docker cannot run on this machine (exit 3). */
    let engineCannot: string | undefined;
    let envDir = '';
    let composeEnv: NodeJS.ProcessEnv = {};
    let dockerBin = '';
    let composeBin = '';
    let port = 0;
    let base = '';
    const composeFiles = [
      '-f',
      path.join(root, 'docker-compose.yml'),
      '-f',
      path.join(root, 'test/docker/compose.test.yml'),
    ];
    const timings: Record<string, string> = {};

    const compose = async (args: string[], timeoutMs = 120_000): Promise<string> => {
      const r = await run(
        composeBin,
        ['--env-file', path.join(envDir, 'empty.env'), '-p', project, ...composeFiles, ...args],
        composeEnv,
        timeoutMs,
      );
      assert.equal(r.code, 0, `docker-compose ${args.join(' ')} failed (${r.code}):\n${r.stdout}${r.stderr}`);
      return r.stdout;
    };
    const docker = async (args: string[], timeoutMs = 60_000): Promise<string> => {
      const r = await run(dockerBin, args, composeEnv, timeoutMs);
      assert.equal(r.code, 0, `docker ${args.join(' ')} failed (${r.code}):\n${r.stdout}${r.stderr}`);
      return r.stdout.trim();
    };
    const container = (service: string): string => `${project}_${service}_1`;
    const inspect = async (service: string, format: string): Promise<string> =>
      docker(['inspect', '--format', format, container(service)]);

    /** The service's node process in the api container, as `[host pid, rss in KiB]` (`docker top`). */
    const nodeProcess = async (): Promise<[number, string]> => {
      const top = await docker(['top', container('api'), '-o', 'pid,rss,args']);
      // `node [flags of the start script] dist/src/server.js` (docker-init's line starts with its own path).
      const line = top
        .split('\n')
        .find((l) => /^\s*\d+\s+\d+\s+node (?:--\S+ )*dist\/src\/server\.js/.test(l));
      assert.ok(line, `the node process in docker top:\n${top}`);
      const [pid, rss] = line.trim().split(/\s+/);
      return [Number(pid), rss ?? ''];
    };
    const nodePid = async (): Promise<number> => (await nodeProcess())[0];

    const apiFetch = async <T>(
      method: string,
      route: string,
      body?: unknown,
    ): Promise<{ status: number; body: T }> => {
      const res = await fetch(`${base}${route}`, {
        method,
        headers: {
          authorization: `Bearer ${tenantKey}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? null : JSON.stringify(body),
        signal: AbortSignal.timeout(10_000),
      });
      return { status: res.status, body: (await res.json()) as T };
    };

    /** Waits until the published port answers /healthz with 200. */
    const untilServing = (timeoutMs: number): Promise<true> =>
      until('the api to answer /healthz on the published port', timeoutMs, async () => {
        const res = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2000) });
        return res.ok ? true : undefined;
      });
    const untilHealthy = (service: string, timeoutMs: number): Promise<true> =>
      until(
        `${service} to be healthy`,
        timeoutMs,
        async () => ((await inspect(service, '{{.State.Health.Status}}')) === 'healthy' ? true : undefined),
        500,
      );

    const untilStatus = (id: string, status: string, timeoutMs: number): Promise<Record<string, unknown>> =>
      until(
        `session ${id} to be ${status}`,
        timeoutMs,
        async () => {
          const res = await apiFetch<Record<string, unknown>>('GET', `/v1/sessions/${id}`);
          return res.status === 200 && res.body['status'] === status ? res.body : undefined;
        },
        500,
      );

    const messagesOf = async (id: string): Promise<Message[]> => {
      const res = await apiFetch<{ data: Message[] }>('GET', `/v1/sessions/${id}/messages`);
      assert.equal(res.status, 200);
      return res.body.data;
    };

    /** Skips (locally) or fails (under CI) when engine.sh found that Docker cannot run here. */
    const requireEngine = (t: TestContext): boolean => {
      if (engine) return true;
      if (engineCannot !== undefined && !isCI) {
        t.skip(`Docker cannot run here: ${engineCannot}`);
        return false;
      }
      assert.fail(`no Docker engine: ${engineCannot ?? 'engine.sh failed (see its output above)'}`);
    };

    before(
      async () => {
        envDir = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-compose-'));
        await writeFile(path.join(envDir, 'empty.env'), '');
        // The Compose secrets (docker-compose.yml `secrets:`), as a deployment writes them; the optional two empty.
        const secretsDir = path.join(envDir, 'secrets');
        await mkdir(secretsDir, { mode: 0o755 });
        const secrets = {
          api_keys: `ci:${tenantKey}`,
          redis_password: redisPassword,
          anthropic_api_key: '',
          webhook_secret_key: '',
        };
        for (const [name, value] of Object.entries(secrets))
          await writeFile(path.join(secretsDir, name), `${value}\n`, { mode: 0o644 });
        const started = Date.now();
        try {
          engine = await startEngine();
        } catch (err) {
          const code = (err as { exitCode?: number }).exitCode;
          if (code === 3) {
            engineCannot = 'test/docker/engine.sh says so (see its output above)';
            if (!isCI) loud(`SKIPPING the Docker Compose tests: ${engineCannot}`);
            return;
          }
          throw err;
        }
        timings['engine and base images'] = `${((Date.now() - started) / 1000).toFixed(1)} s`;
        dockerBin = engine.env['DOCKER_BIN'] ?? '';
        composeBin = engine.env['COMPOSE_BIN'] ?? '';
        port = await freePort();
        base = `http://127.0.0.1:${port}`;
        composeEnv = {
          PATH: process.env['PATH'],
          HOME: process.env['HOME'],
          DOCKER_HOST: engine.env['DOCKER_HOST'],
          // The classic builder, through the engine's API: no BuildKit frontend image to fetch.
          COMPOSE_DOCKER_CLI_BUILD: '0',
          DOCKER_BUILDKIT: '0',
          NODE_IMAGE: engine.env['NODE_IMAGE'],
          REDIS_IMAGE: engine.env['REDIS_IMAGE'],
          PROMETHEUS_IMAGE: engine.env['PROMETHEUS_IMAGE'],
          HAPROXY_IMAGE: engine.env['HAPROXY_IMAGE'],
          API_PUBLISH: `127.0.0.1:${port}`,
          SECRETS_DIR: secretsDir,
          SHUTDOWN_GRACE_MS: String(shutdownGraceMs),
          LOG_LEVEL: 'info',
        };
        // Whatever a killed earlier run left of this project.
        await compose([
          '--profile',
          'observability',
          'down',
          '--volumes',
          '--remove-orphans',
          '--timeout',
          '1',
        ]);
      },
      // The first run on a machine builds the base images; another run may hold the engine's lock for a while.
      { timeout: 1_800_000 },
    );

    after(
      async () => {
        if (engine) {
          const down = await run(
            composeBin,
            [
              '--env-file',
              path.join(envDir, 'empty.env'),
              '-p',
              project,
              ...composeFiles,
              '--profile',
              'observability',
              'down',
              '--volumes',
              '--timeout',
              '5',
            ],
            composeEnv,
            120_000,
          );
          if (down.code !== 0)
            process.stderr.write(`docker-compose down failed: ${down.stdout}${down.stderr}\n`);
          engine.process.stdin.end();
          const code = await Promise.race([
            engine.exited,
            new Promise((resolve) => setTimeout(() => resolve('timeout'), 120_000).unref()),
          ]);
          if (code === 'timeout') engine.process.kill('SIGTERM');
        }
        if (envDir) await rm(envDir, { recursive: true, force: true });
        if (Object.keys(timings).length > 0)
          process.stderr.write(`[docker-compose.test] timings: ${JSON.stringify(timings)}\n`);
      },
      { timeout: 300_000 },
    );

    test(
      'builds the image: multi-stage on the NODE_IMAGE base, non-root, with a healthcheck',
      { timeout: 900_000 },
      async (t) => {
        if (!requireEngine(t)) return;
        const started = Date.now();
        await compose(['build', 'api'], 900_000);
        timings['image build'] = `${((Date.now() - started) / 1000).toFixed(1)} s`;
        const image = `${project}_api`;
        assert.equal(await docker(['image', 'inspect', '--format', '{{.Config.User}}', image]), 'node');
        const healthcheck = JSON.parse(
          await docker(['image', 'inspect', '--format', '{{json .Config.Healthcheck}}', image]),
        ) as { Test: string[] };
        assert.equal(healthcheck.Test[0], 'CMD');
        assert.match(healthcheck.Test.join(' '), /\/healthz/);
        // Built on the local base: its layers are the image's first ones.
        const baseLayers = JSON.parse(
          await docker([
            'image',
            'inspect',
            '--format',
            '{{json .RootFS.Layers}}',
            engine!.env['NODE_IMAGE'] ?? '',
          ]),
        ) as string[];
        const layers = JSON.parse(
          await docker(['image', 'inspect', '--format', '{{json .RootFS.Layers}}', image]),
        ) as string[];
        assert.deepEqual(layers.slice(0, baseLayers.length), baseLayers);
        assert.ok(layers.length > baseLayers.length, 'the runtime stage adds layers');
        // Compiled JavaScript only, no dev dependencies, no TypeScript sources.
        const listing = await docker([
          'run',
          '--rm',
          '--network',
          'none',
          '--entrypoint',
          'sh',
          image,
          '-c',
          'id -u; ls /app; ls /app/node_modules | grep -c . ; test ! -e /app/node_modules/typescript && test ! -e /app/src && echo clean',
        ]);
        const [uid, ...rest] = listing.split('\n');
        assert.equal(uid, '1000');
        assert.ok(
          rest.includes('dist') && rest.includes('node_modules') && rest.includes('package.json'),
          listing,
        );
        assert.equal(rest.at(-1), 'clean');
        const size = Number(await docker(['image', 'inspect', '--format', '{{.Size}}', image]));
        timings['image size'] = `${(size / 1e6).toFixed(0)} MB`;
      },
    );

    test(
      'up -d: both services become healthy; only 127.0.0.1 is published; nothing is routed off the network',
      { timeout: 300_000 },
      async (t) => {
        if (!requireEngine(t)) return;
        const started = Date.now();
        await compose(['up', '-d', '--no-build'], 180_000);
        await untilHealthy('redis', 120_000);
        await untilServing(120_000);
        const apiStarted = Date.parse(await inspect('api', '{{.State.StartedAt}}'));
        timings['api container start to serving'] = `${((Date.now() - apiStarted) / 1000).toFixed(1)} s`;
        timings['up to serving'] = `${((Date.now() - started) / 1000).toFixed(1)} s`;
        await untilHealthy('api', 120_000);
        timings['up to healthy'] = `${((Date.now() - started) / 1000).toFixed(1)} s`;

        const ready = await fetch(`${base}/readyz`);
        const readyBody = (await ready.json()) as { status: string; redis: string; model: string };
        assert.equal(ready.status, 200);
        assert.equal(readyBody.redis, 'ok');
        assert.equal(readyBody.model, 'offline', 'no ANTHROPIC_API_KEY: the offline model answers');
        // Redis takes no client without the password (the api has it, from its secret file, so it is ready).
        const noAuth = await run(
          dockerBin,
          ['exec', container('redis'), 'redis-cli', 'ping'],
          composeEnv,
          30_000,
        );
        assert.match(noAuth.stdout + noAuth.stderr, /NOAUTH/, 'redis refuses an unauthenticated client');
        const env = await inspect('api', '{{json .Config.Env}}');
        assert.ok(
          !env.includes(tenantKey) && !env.includes(redisPassword),
          'no secret in the container environment',
        );
        // API_KEYS is enforced on 0.0.0.0.
        const anonymous = await fetch(`${base}/v1/sessions`);
        assert.equal(anonymous.status, 401);
        // The console's API layer is the typed client, bundled for browsers in the image's build stage.
        const clientJs = await fetch(`${base}/console/vendor/client.js`);
        assert.equal(clientJs.status, 200, 'the image carries dist/client/browser.js');
        assert.match(await clientJs.text(), /\/\/# sourceMappingURL=browser\.js\.map\s*$/);
        const apiJs = await fetch(`${base}/console/api.js`);
        assert.equal(
          await apiJs.text(),
          readFileSync(path.join(root, 'public/console/api.js'), 'utf8'),
          'the console loads its API through the client',
        );

        // The balancer publishes the port; the api replicas publish nothing.
        const lbPorts = JSON.parse(await inspect('lb', '{{json .NetworkSettings.Ports}}')) as Record<
          string,
          Array<{ HostIp: string; HostPort: string }> | null
        >;
        assert.deepEqual(lbPorts['3000/tcp'], [{ HostIp: '127.0.0.1', HostPort: String(port) }]);
        const apiPorts = JSON.parse(await inspect('api', '{{json .NetworkSettings.Ports}}')) as Record<
          string,
          unknown[] | null
        >;
        assert.ok(
          Object.values(apiPorts).every((bindings) => bindings === null || bindings.length === 0),
          'api publishes nothing',
        );
        const redisPorts = JSON.parse(await inspect('redis', '{{json .NetworkSettings.Ports}}')) as Record<
          string,
          unknown[] | null
        >;
        assert.ok(
          Object.values(redisPorts).every((bindings) => bindings === null || bindings.length === 0),
          'redis publishes nothing',
        );
        for (const service of ['api', 'redis', 'lb']) {
          const networks = Object.keys(
            JSON.parse(await inspect(service, '{{json .NetworkSettings.Networks}}')) as object,
          );
          assert.deepEqual(networks, [`${project}_default`], `${service} is on the Compose network only`);
        }
        // The engine neither forwards nor masquerades (engine.sh); a host that forwards anyway drops the bridge's traffic.
        const forwarding = readFileSync('/proc/sys/net/ipv4/ip_forward', 'utf8').trim();
        if (forwarding !== '0') {
          const rules = await run('iptables', ['-S', 'FORWARD'], process.env, 10_000);
          assert.match(rules.stdout, new RegExp(`-i ${engine!.env['BRIDGE']} -j DROP`));
        }
        const user = await docker(['exec', container('api'), 'id', '-u']);
        assert.equal(user, '1000');
        // Hardened: the runtime user cannot change the code, nor write outside the tmpfs, and holds no capability.
        for (const target of ['/app/dist/src/server.js', '/app/new-file']) {
          const touched = await run(
            dockerBin,
            ['exec', container('api'), 'touch', target],
            composeEnv,
            30_000,
          );
          assert.notEqual(touched.code, 0, `${target} is not writable`);
        }
        assert.equal(
          (await run(dockerBin, ['exec', container('api'), 'touch', '/tmp/x'], composeEnv, 30_000)).code,
          0,
        );
        const capabilities = await docker(['exec', container('api'), 'grep', 'CapEff', '/proc/1/status']);
        assert.match(capabilities, /CapEff:\s+0+$/);
        const rssKb = Number((await nodeProcess())[1]);
        timings['api RSS at idle'] = `${(rssKb / 1024).toFixed(0)} MB`;
      },
    );

    test(
      "the balancer: /metrics stays on the Compose network; a closed SSE stream gives its slot back at once; with Redis frozen every answer is the service's JSON 503",
      { timeout: 300_000 },
      async (t) => {
        if (!requireEngine(t)) return;
        const metrics = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(10_000) });
        assert.equal(metrics.status, 404);
        assert.equal(((await metrics.json()) as { error: { code: string } }).error.code, 'route_not_found');

        // A client token holds at most CLIENT_TOKEN_MAX_STREAMS (4) event streams. A client that leaves sends its FIN
        // (an EventSource closed, a tab gone): the balancer ends that connection at once (`option abortonclose`), not
        // at its client timeout (60 s), so the replica's stream ends and gives its slot back.
        const created = await apiFetch<{ id: string }>('POST', '/v1/sessions', { input: 'Hello' });
        assert.equal(created.status, 201);
        const minted = await apiFetch<{ token: string }>('POST', '/v1/client-tokens', {
          session_id: created.body.id,
          scopes: ['read'],
        });
        assert.equal(minted.status, 201);
        const request =
          `GET /v1/sessions/${created.body.id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
          `Authorization: Bearer ${minted.body.token}\r\nAccept: text/event-stream\r\n\r\n`;
        /** Opens a stream, half-closes it once its head is in (reading on), and resolves when the balancer closes it. */
        const openThenLeave = (i: number) =>
          new Promise<{ status: number; closed: Promise<number>; sock: net.Socket }>((resolve, reject) => {
            const sock = net.connect(port, '127.0.0.1', () => sock.write(request));
            let head = '';
            const closed = new Promise<number>((done) => sock.once('close', () => done(Date.now())));
            sock.setEncoding('utf8');
            sock.on('data', (chunk: string) => {
              if (head.includes('\r\n\r\n')) return;
              head += chunk;
              if (!head.includes('\r\n\r\n')) return;
              sock.end();
              resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]), closed, sock });
            });
            sock.once('error', reject);
            sock.setTimeout(30_000, () => {
              sock.destroy();
              reject(new Error(`event stream ${i}: no answer within 30 s`));
            });
          });
        const left = Date.now();
        const streams = await Promise.all([0, 1, 2, 3].map(openThenLeave));
        assert.deepEqual(
          streams.map((x) => x.status),
          [200, 200, 200, 200],
        );
        const late = new Promise<null>((r) => setTimeout(() => r(null), 15_000).unref());
        const closedAt = await Promise.race([Promise.all(streams.map((x) => x.closed)), late]);
        for (const x of streams) x.sock.destroy();
        assert.ok(closedAt, 'the balancer kept the connections its clients had left for 15 s');
        const closedIn = Math.max(...closedAt) - left;
        timings['SSE streams half-closed by their client, closed by the balancer'] = `${closedIn} ms`;
        assert.ok(closedIn < 10_000, `the balancer closed them ${closedIn} ms after their clients left`);
        // Their slots are free: two more open (the replica may take a moment to see its side closed).
        for (const i of [4, 5]) {
          const next = await until(`event stream ${i} to open`, 10_000, async () => {
            const x = await openThenLeave(i);
            return x.status === 429 ? undefined : x;
          });
          next.sock.destroy();
          assert.equal(next.status, 200);
        }

        // Redis frozen: the replicas' /readyz fails and the balancer takes them all out of rotation (2 checks 2 s
        // apart); requests then go to the live ones (api_live), so the answer is still the service's 503, with
        // Retry-After, never the balancer's own page.
        await docker(['pause', container('redis')]);
        try {
          const frozen = Date.now();
          let answers = 0;
          while (Date.now() - frozen < 9000) {
            const res = await fetch(`${base}/v1/sessions`, {
              headers: { authorization: `Bearer ${tenantKey}` },
              signal: AbortSignal.timeout(15_000),
            });
            const body = await res.text();
            const at = `${Date.now() - frozen} ms after the freeze: ${body.slice(0, 200)}`;
            assert.equal(res.status, 503, at);
            assert.match(res.headers.get('content-type') ?? '', /^application\/json/, at);
            assert.equal(
              (JSON.parse(body) as { error: { code: string } }).error.code,
              'store_unavailable',
              at,
            );
            assert.ok(res.headers.get('retry-after'), at);
            answers++;
            // Paces the probe; the loop's bound is the balancer's check window above.
            await new Promise((r) => setTimeout(r, 500));
          }
          assert.ok(answers >= 3, `${answers} answers during the freeze`);
          const health = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(10_000) });
          assert.equal(health.status, 200, 'a replica alive answers /healthz, Redis or not');
        } finally {
          await docker(['unpause', container('redis')]);
        }
        await until('the replicas back in rotation', 60_000, async () => {
          const res = await apiFetch<unknown>('GET', '/v1/sessions');
          return res.status === 200 ? true : undefined;
        });
        // The steps below count the sessions they made.
        assert.equal((await apiFetch<unknown>('DELETE', `/v1/sessions/${created.body.id}`)).status, 200);
      },
    );

    const question = 'What is the weather in Paris and Tokyo?';
    let killedSession = '';

    test(
      'a streamed session survives the api being killed mid-turn (SIGKILL): restarted by its policy, it finishes with a valid history',
      { timeout: 300_000 },
      async (t) => {
        if (!requireEngine(t)) return;
        const created = await apiFetch<{ id: string; status: string }>('POST', '/v1/sessions', {
          input: question,
          tools: ['get_weather'],
        });
        assert.equal(created.status, 201);
        const id = created.body.id;
        killedSession = id;
        const reader = new EventReader(`ws://127.0.0.1:${port}/v1/sessions/${id}/stream`, tenantKey);
        await reader.connect();
        // The second turn is streaming: kill the container under it.
        await reader.waitFor(
          'turn 2 streaming',
          (e) => e.type === 'stream.event' && e.data['iteration'] === 2,
          120_000,
        );
        const restartsBefore = Number(await inspect('api', '{{.RestartCount}}'));
        // A crash: SIGKILL to the node process, from the host. (`docker kill` would not do: Docker marks a container it
        // kills as stopped by hand, and no restart policy brings that back.)
        process.kill(await nodePid(), 'SIGKILL');
        await reader.waitClosed(30_000);
        assert.equal(
          reader.events.some((e) => e.type === 'turn.completed' && e.data['iteration'] === 2),
          false,
          'killed before turn 2 completed',
        );

        await until('the restart policy to restart the api', 60_000, async () =>
          Number(await inspect('api', '{{.RestartCount}}')) > restartsBefore &&
          (await inspect('api', '{{.State.Running}}')) === 'true'
            ? true
            : undefined,
        );
        await untilServing(120_000);
        await reader.connect();
        const end = await reader.waitFor(
          'the session to end',
          (e) => e.type === 'session.status' && e.data['status'] !== 'running',
          120_000,
        );
        reader.close();
        assert.equal(end.data['status'], 'idle');
        assert.equal(end.data['stop_reason'], 'end_turn');

        // The new process started turn 2 again; every iteration was persisted once.
        assert.ok(
          reader.events.filter((e) => e.type === 'turn.started' && e.data['iteration'] === 2).length >= 2,
          'turn 2 started again',
        );
        const persisted = reader.events
          .filter((e) => e.type === 'iteration.persisted')
          .map((e) => e.data['iteration']);
        assert.deepEqual(persisted, [1, 2]);
        const ids = reader.events.map((e) => e.id);
        assert.equal(new Set(ids).size, ids.length, 'each event once across the reconnect');
        assert.equal(assertValidHistory(await messagesOf(id), question), 2);
        const session = await apiFetch<{ iteration: number; status: string }>('GET', `/v1/sessions/${id}`);
        assert.equal(session.body.iteration, 2);
        timings['api RSS after the session'] = `${(Number((await nodeProcess())[1]) / 1024).toFixed(0)} MB`;
      },
    );

    const longQuestion = 'What is the weather in Paris, Tokyo, Lima, Oslo and Cairo?';
    let stoppedSession = '';
    let historyBeforeDown: Message[] = [];

    test(
      'docker-compose stop mid-run: the api gets its SHUTDOWN_GRACE_MS (stop_grace_period above it) and exits 0',
      { timeout: 300_000 },
      async (t) => {
        if (!requireEngine(t)) return;
        historyBeforeDown = await messagesOf(killedSession);
        const created = await apiFetch<{ id: string }>('POST', '/v1/sessions', {
          input: longQuestion,
          tools: ['get_weather'],
        });
        assert.equal(created.status, 201);
        stoppedSession = created.body.id;
        const reader = new EventReader(
          `ws://127.0.0.1:${port}/v1/sessions/${stoppedSession}/stream`,
          tenantKey,
        );
        await reader.connect();
        await reader.waitFor(
          'turn 1 streaming',
          (e) => e.type === 'stream.event' && e.data['iteration'] === 1,
          60_000,
        );
        const started = Date.now();
        await compose(['stop', 'api'], 120_000);
        const took = Date.now() - started;
        reader.close();
        timings['graceful stop mid-run'] = `${(took / 1000).toFixed(1)} s`;
        assert.equal(await inspect('api', '{{.State.ExitCode}}'), '0', 'a graceful exit, not SIGKILL (137)');
        assert.equal(await inspect('api', '{{.State.OOMKilled}}'), 'false');
        // The run outlasts the grace: the process waited for it, then handed it over.
        assert.ok(
          took >= shutdownGraceMs - 500,
          `the stop took ${took} ms, the grace is ${shutdownGraceMs} ms`,
        );
        assert.ok(took < 30_000, `the stop took ${took} ms, within stop_grace_period`);
        const logs = (await run(dockerBin, ['logs', container('api')], composeEnv, 30_000)).stdout;
        assert.match(logs, /shutting down/);
      },
    );

    test(
      'down, then up: sessions are still there (append-only volume), and the stopped run resumes and finishes',
      { timeout: 300_000 },
      async (t) => {
        if (!requireEngine(t)) return;
        await compose(['down', '--timeout', '30'], 120_000);
        const containers = await docker([
          'ps',
          '-aq',
          '--filter',
          `label=com.docker.compose.project=${project}`,
        ]);
        assert.equal(containers, '', 'down removed the containers');
        const volumes = await docker([
          'volume',
          'ls',
          '-q',
          '--filter',
          `label=com.docker.compose.project=${project}`,
        ]);
        assert.ok(volumes.split('\n').includes(`${project}_redis-data`), 'the volume is kept');

        await compose(['up', '-d', '--no-build'], 180_000);
        await untilServing(180_000);
        assert.deepEqual(await messagesOf(killedSession), historyBeforeDown);
        const list = await apiFetch<{ data: Array<{ id: string }> }>('GET', '/v1/sessions?limit=10');
        assert.deepEqual(list.body.data.map((s) => s.id).sort(), [killedSession, stoppedSession].sort());

        const done = await untilStatus(stoppedSession, 'idle', 180_000);
        assert.equal(done['stop_reason'], 'end_turn');
        assert.equal(assertValidHistory(await messagesOf(stoppedSession), longQuestion), 2);
      },
    );

    test(
      'the observability profile: its Prometheus comes up and scrapes the api',
      { timeout: 300_000 },
      async (t) => {
        if (!requireEngine(t)) return;
        // Only Prometheus of the profile: Grafana, the OpenTelemetry collector and Jaeger have no local stand-ins.
        await compose(['--profile', 'observability', 'up', '-d', '--no-build', 'prometheus'], 180_000);
        assert.equal(await inspect('prometheus', '{{.State.Running}}'), 'true');
        // Asked from inside the Compose network (the api container's node), not through the published 9090.
        const query = async (route: string): Promise<unknown> => {
          const script = `fetch('http://prometheus:9090${route}').then(async (r) => { if (!r.ok) process.exit(1); process.stdout.write(await r.text()); }, () => process.exit(1))`;
          const r = await run(
            dockerBin,
            ['exec', container('api'), 'node', '-e', script],
            composeEnv,
            30_000,
          );
          return r.code === 0 ? (JSON.parse(r.stdout) as unknown) : undefined;
        };
        const target = await until(
          'Prometheus to scrape the api',
          180_000,
          async () => {
            const body = (await query('/api/v1/targets')) as
              | { data: { activeTargets: Array<{ labels: Record<string, string>; health: string }> } }
              | undefined;
            return body?.data.activeTargets.find(
              (x) => x.labels['job'] === 'toolrunner-sessions' && x.health === 'up',
            );
          },
          1000,
        );
        assert.match(target.labels['instance'] ?? '', /:3000$/);
        const series = (await query(
          `/api/v1/query?query=${encodeURIComponent('count({job="toolrunner-sessions",__name__=~"trs_.+"})')}`,
        )) as { data: { result: Array<{ value: [number, string] }> } };
        assert.ok(Number(series.data.result[0]?.value[1]) > 0, 'trs_* series scraped from the api');
      },
    );

    test(
      'scale-out: three replicas behind the balancer; one killed mid-run, every session finishes and every WebSocket follower resumes on another replica with nothing missed',
      { timeout: 600_000 },
      async (t) => {
        if (!requireEngine(t)) return;
        await compose(['up', '-d', '--no-build', '--scale', 'api=3'], 180_000);
        const replicas = [1, 2, 3].map((n) => `${project}_api_${n}`);
        for (const c of replicas)
          await until(
            `${c} to be healthy`,
            120_000,
            async () =>
              (await docker(['inspect', '--format', '{{.State.Health.Status}}', c])) === 'healthy'
                ? true
                : undefined,
            500,
          );
        await untilServing(60_000);
        const activeRuns = async (c: string): Promise<number> => {
          const script = `fetch('http://127.0.0.1:3000/readyz').then(async (r) => process.stdout.write(String((await r.json()).active_runs)), () => process.exit(1))`;
          const r = await run(dockerBin, ['exec', c, 'node', '-e', script], composeEnv, 30_000);
          return r.code === 0 ? Number(r.stdout) : 0;
        };

        const sessions: Array<{ id: string; reader: EventReader }> = [];
        for (let i = 0; i < 6; i++) {
          const created = await apiFetch<{ id: string }>('POST', '/v1/sessions', {
            input: longQuestion,
            tools: ['get_weather'],
          });
          assert.equal(created.status, 201);
          const reader = new EventReader(
            `ws://127.0.0.1:${port}/v1/sessions/${created.body.id}/stream`,
            tenantKey,
          );
          await reader.connect();
          sessions.push({ id: created.body.id, reader });
        }
        // Every session is streaming a turn, and a replica runs some of them: kill that one's node process.
        for (const { reader } of sessions)
          await reader.waitFor('a turn streaming', (e) => e.type === 'stream.event', 120_000);
        const victim = await until('a replica running sessions', 60_000, async () => {
          for (const c of replicas) if ((await activeRuns(c)) > 0) return c;
          return undefined;
        });
        const top = await docker(['top', victim, '-o', 'pid,args']);
        const line = top.split('\n').find((l) => /^\s*\d+\s+node (?:--\S+ )*dist\/src\/server\.js/.test(l));
        assert.ok(line, `the node process of ${victim}:\n${top}`);
        process.kill(Number(line.trim().split(/\s+/)[0]), 'SIGKILL');

        // Each follower that was cut reconnects through the balancer (to a live replica) after its last event.
        const final = (e: Envelope) =>
          e.type === 'session.status' && e.data['status'] !== 'running' && e.data['status'] !== undefined;
        await Promise.all(
          sessions.map(async ({ reader }) => {
            for (;;) {
              if (reader.events.some(final)) return;
              if (reader.closed)
                await until(
                  'the follower to reconnect',
                  60_000,
                  () =>
                    reader.connect().then(
                      () => true,
                      () => undefined,
                    ),
                  500,
                );
              await reader.waitFor('the run to end', final, 240_000).catch((err: Error) => {
                if (!reader.closed) throw err;
              });
            }
          }),
        );
        let cut = 0;
        for (const { id, reader } of sessions) {
          reader.close();
          const end = reader.events.find(final)!;
          assert.equal(end.data['status'], 'idle', `${id}: ${JSON.stringify(end.data)}`);
          const log = await apiFetch<{ data: Envelope[] }>('GET', `/v1/sessions/${id}/events?limit=1000`);
          const expected = log.body.data.map((e) => e.id);
          const seen = reader.events.map((e) => e.id);
          assert.deepEqual(
            seen.slice(0, seen.indexOf(end.id) + 1),
            expected.slice(0, expected.indexOf(end.id) + 1),
            `${id}: every event once, in order`,
          );
          assert.equal(assertValidHistory(await messagesOf(id), longQuestion) >= 2, true);
          if (reader.reconnects > 0) cut++;
        }
        assert.ok(cut > 0, 'some followers were cut by the kill and resumed');
        timings['scale-out followers resumed'] = String(cut);
      },
    );
  },
);
