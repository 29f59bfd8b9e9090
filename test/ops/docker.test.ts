import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { findExecutable } from '../../src/redis/embedded.js';

/**
 * Checks the Dockerfile, .dockerignore and docker-compose.yml without a Docker engine (test/ops/docker-compose.test.ts
 * runs them on a real one): the Dockerfile is parsed here;
 * docker-compose.yml is parsed, and validated with Debian's `docker-compose config` (client-side; .ci/run installs
 * it). Without docker-compose the validation is skipped locally and fails under CI=true.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (file: string): string => readFileSync(path.join(root, file), 'utf8');

interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

/** Dockerfile instructions, with line continuations joined and comments (and parser directives) dropped. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let buffer = '';
  let startLine = 0;
  const lines = text.split(/\r?\n/);
  lines.forEach((raw, index) => {
    const trimmed = raw.trim();
    if (buffer === '' && (trimmed === '' || trimmed.startsWith('#'))) return;
    if (buffer !== '' && trimmed.startsWith('#')) return; // comment lines inside a continuation are skipped
    if (buffer === '') startLine = index + 1;
    if (trimmed.endsWith('\\')) {
      buffer += `${trimmed.slice(0, -1)} `;
      return;
    }
    buffer += trimmed;
    const match = /^(\S+)\s*(.*)$/s.exec(buffer);
    if (match?.[1] !== undefined) {
      out.push({ keyword: match[1].toUpperCase(), args: (match[2] ?? '').trim(), line: startLine });
    }
    buffer = '';
  });
  assert.equal(buffer, '', 'the Dockerfile ends inside a line continuation');
  return out;
}

/** Stages, each the instructions from its FROM to the next. */
function stages(instructions: Instruction[]): Instruction[][] {
  const result: Instruction[][] = [];
  for (const ins of instructions) {
    if (ins.keyword === 'FROM') result.push([ins]);
    else if (ins.keyword !== 'ARG' || result.length > 0) result.at(-1)?.push(ins);
  }
  return result;
}

/** An exec-form (JSON array) argument list, e.g. of CMD. */
function execForm(args: string): string[] {
  const parsed: unknown = JSON.parse(args);
  assert.ok(Array.isArray(parsed) && parsed.every((a) => typeof a === 'string'), `not exec form: ${args}`);
  return parsed as string[];
}

/** `ENV A=1 B=2` or the legacy `ENV A 1`. */
function envPairs(args: string): Map<string, string> {
  const pairs = new Map<string, string>();
  if (!args.includes('=') || /^\S+\s+[^=]*$/.test(args)) {
    const m = /^(\S+)\s+(.*)$/.exec(args);
    if (m?.[1] !== undefined) pairs.set(m[1], m[2] ?? '');
    return pairs;
  }
  for (const m of args.matchAll(/(\w+)=("(?:[^"\\]|\\.)*"|\S*)/g)) {
    const value = m[2] ?? '';
    if (m[1] !== undefined) pairs.set(m[1], value.startsWith('"') ? (JSON.parse(value) as string) : value);
  }
  return pairs;
}

/** Runs `node -e <script>` with `env` and resolves its exit code. */
function runNodeScript(script: string, env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['-e', script], { env, timeout: 15_000 }, (err) => {
      if (!err) resolve(0);
      else resolve(typeof err.code === 'number' ? err.code : -1);
    });
  });
}

/** A local HTTP server whose /healthz answers `status`. */
async function healthServer(status: number): Promise<{ port: number; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    res.statusCode = req.url === '/healthz' ? status : 404;
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('Dockerfile', () => {
  const instructions = parseDockerfile(read('Dockerfile'));
  const allStages = stages(instructions);
  const final = allStages.at(-1) ?? [];
  const finalOf = (keyword: string): Instruction[] => final.filter((i) => i.keyword === keyword);
  const pkg = JSON.parse(read('package.json')) as {
    scripts: Record<string, string>;
    dependencies: Record<string, string>;
  };

  test('is multi-stage, every stage FROM ${NODE_IMAGE} (default node:24-bookworm-slim), with an npm ci --omit=dev deps stage', () => {
    assert.ok(allStages.length >= 2, 'multi-stage');
    // The base image is a build arg declared before the first FROM; its default is the public image.
    const firstFrom = instructions.findIndex((i) => i.keyword === 'FROM');
    const args = instructions.slice(0, firstFrom).filter((i) => i.keyword === 'ARG');
    assert.deepEqual(
      args.map((i) => i.args),
      ['NODE_IMAGE=node:24-bookworm-slim'],
    );
    for (const stage of allStages) assert.match(stage[0]?.args ?? '', /^\$\{NODE_IMAGE\}\s+AS\s+\w+$/i);
    // No `# syntax=` directive: BuildKit would fetch that frontend image from a registry.
    assert.doesNotMatch(read('Dockerfile'), /^#\s*syntax=/m);
    const deps = allStages.find((s) => /\bAS\s+deps\b/i.test(s[0]?.args ?? ''));
    assert.ok(deps, 'a stage named deps');
    assert.ok(
      deps.some((i) => i.keyword === 'RUN' && /\bnpm ci\b/.test(i.args) && /--omit=dev\b/.test(i.args)),
      'deps runs npm ci --omit=dev',
    );
    assert.ok(
      deps.some((i) => i.keyword === 'COPY' && /package-lock\.json/.test(i.args)),
      'npm ci needs package-lock.json',
    );
    assert.ok(
      finalOf('COPY').some((i) => /--from=deps\b/.test(i.args) && /node_modules/.test(i.args)),
      'the final stage copies node_modules from deps',
    );
    // The image runs compiled JavaScript: no TypeScript loader among the production dependencies.
    assert.equal(pkg.dependencies['tsx'], undefined, 'tsx is a dev dependency only');
  });

  test('compiles the sources in a build stage with the build script', () => {
    const build = allStages.find((s) => /\bAS\s+build\b/i.test(s[0]?.args ?? ''));
    assert.ok(build, 'a stage named build');
    const runs = build.filter((i) => i.keyword === 'RUN').map((i) => i.args);
    assert.ok(
      runs.some((r) => /\bnpm ci\b/.test(r) && !/--omit=dev/.test(r)),
      'the build stage has the dev dependencies',
    );
    assert.ok(
      runs.some((r) => /\bnpm run build\b/.test(r)),
      'the build stage runs npm run build',
    );
    assert.match(pkg.scripts['build'] ?? '', /tsconfig\.build\.json/);
    const tsBuild = JSON.parse(read('tsconfig.build.json')) as {
      compilerOptions: { outDir?: string; noEmit?: boolean };
      include: string[];
    };
    assert.equal(tsBuild.compilerOptions.outDir, 'dist');
    assert.equal(tsBuild.compilerOptions.noEmit, false);
    for (const dir of ['src', 'routes', 'tools']) assert.ok(tsBuild.include.includes(dir), dir);
  });

  test('copies the compiled JavaScript the start script runs, from the build stage', () => {
    const copied = finalOf('COPY').flatMap((i) =>
      i.args
        .split(/\s+/)
        .filter((a) => !a.startsWith('--'))
        .slice(0, -1),
    );
    assert.ok(copied.includes('package.json'), 'COPY package.json');
    const fromBuild = finalOf('COPY')
      .filter((i) => /--from=build\b/.test(i.args))
      .flatMap((i) => i.args.split(/\s+/).filter((a) => !a.startsWith('--')));
    for (const dir of ['src', 'routes', 'tools']) {
      assert.ok(fromBuild.includes(`/app/dist/${dir}`), `COPY --from=build /app/dist/${dir}`);
    }
    // The start script's entry point is one of the files copied.
    const entry = (pkg.scripts['start'] ?? '').trim().split(/\s+/).at(-1) ?? '';
    assert.match(entry, /^dist\/src\/.+\.js$/);
  });

  test('the runtime stage leaves the code root-owned (no --chown to the runtime user)', () => {
    const runtime = read('Dockerfile').split(/^FROM .* AS runtime$/m)[1] ?? '';
    assert.ok(runtime.includes('COPY'), 'a runtime stage');
    assert.doesNotMatch(runtime, /--chown/);
  });

  test('runs as a non-root user', () => {
    const users = finalOf('USER');
    assert.ok(users.length > 0, 'USER is set in the final stage');
    const user = users.at(-1)?.args.split(':')[0] ?? '';
    assert.notEqual(user, 'root');
    assert.notEqual(user, '0');
    assert.equal(user, 'node');
    const userLine = users.at(-1)?.line ?? 0;
    const cmdLine = finalOf('CMD').at(-1)?.line ?? 0;
    assert.ok(userLine < cmdLine, 'USER comes before CMD');
  });

  test('sets HOST=0.0.0.0, PORT=3000, NODE_ENV=production and exposes 3000', () => {
    const env = new Map<string, string>();
    for (const i of finalOf('ENV')) for (const [k, v] of envPairs(i.args)) env.set(k, v);
    assert.equal(env.get('HOST'), '0.0.0.0');
    assert.equal(env.get('PORT'), '3000');
    assert.equal(env.get('NODE_ENV'), 'production');
    assert.ok(finalOf('EXPOSE').some((i) => i.args.split(/\s+/).includes('3000')));
  });

  test('has a HEALTHCHECK that fetches /healthz with node', async () => {
    const hc = finalOf('HEALTHCHECK').at(-1);
    assert.ok(hc, 'HEALTHCHECK present');
    const cmd = /\bCMD\s+(\[.*\])\s*$/s.exec(hc.args)?.[1];
    assert.ok(cmd, 'HEALTHCHECK CMD in exec form');
    const argv = execForm(cmd);
    assert.equal(argv[0], 'node');
    assert.equal(argv[1], '-e');
    const script = argv[2] ?? '';
    assert.match(script, /fetch\(/);
    assert.match(script, /127\.0\.0\.1/);
    assert.match(script, /\/healthz/);

    // It really works: exit 0 on 200, 1 on 503 or when nothing answers.
    const ok = await healthServer(200);
    const bad = await healthServer(503);
    try {
      assert.equal(await runNodeScript(script, { ...process.env, PORT: String(ok.port) }), 0);
      assert.equal(await runNodeScript(script, { ...process.env, PORT: String(bad.port) }), 1);
    } finally {
      await bad.close();
      await ok.close();
    }
    assert.equal(await runNodeScript(script, { ...process.env, PORT: String(bad.port) }), 1);
  });

  test('CMD is `npm start` or exactly the start script', () => {
    const cmd = finalOf('CMD').at(-1);
    assert.ok(cmd, 'CMD present');
    const argv = execForm(cmd.args);
    const start = pkg.scripts['start'];
    assert.ok(start, 'package.json has a start script');
    // The script's environment assignments (`NAME=${NAME:-value} exec node …`) are the image's ENV instead.
    const startArgv = start
      .trim()
      .replace(/^(?:[A-Z_]+=\S+\s+)*exec\s+/, '')
      .split(/\s+/);
    assert.ok(
      JSON.stringify(argv) === JSON.stringify(['npm', 'start']) ||
        JSON.stringify(argv) === JSON.stringify(startArgv),
      `CMD ${JSON.stringify(argv)} is neither ["npm","start"] nor the start script ${JSON.stringify(startArgv)}`,
    );
  });
});

describe('.dockerignore', () => {
  const patterns = read('.dockerignore')
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));

  test('keeps node_modules, .git and local data out of the build context', () => {
    for (const p of ['node_modules', '.git', '.data']) assert.ok(patterns.includes(p), p);
  });

  test('does not exclude what the image is built from', () => {
    for (const needed of [
      'package.json',
      'package-lock.json',
      'tsconfig.json',
      'tsconfig.build.json',
      'src',
      'routes',
      'tools',
    ]) {
      assert.ok(!patterns.includes(needed) && !patterns.includes(`${needed}/`), needed);
    }
    assert.ok(!patterns.some((p) => p === '*' || p === '*.json' || p === '*.ts'));
  });
});

describe('docker-compose.yml', () => {
  type Service = Record<string, any>;
  const compose = parseYaml(read('docker-compose.yml')) as {
    services: Record<string, Service>;
    volumes?: Record<string, unknown>;
  };
  const redis = compose.services['redis'] ?? {};
  const api = compose.services['api'] ?? {};

  test('redis: ${REDIS_IMAGE:-redis:7-alpine} with AOF on a named volume and a ping healthcheck', () => {
    assert.equal(redis['image'], '${REDIS_IMAGE:-redis:7-alpine}');
    const command = ([] as unknown[]).concat(redis['command']).join(' ');
    assert.match(command, /\bredis-server\b.*--appendonly yes/);
    assert.match(
      command,
      /--requirepass "\$\$\(cat \/run\/secrets\/redis_password\)"/,
      'a password from its secret',
    );
    assert.deepEqual(redis['secrets'], ['redis_password']);
    assert.deepEqual(redis['volumes'], ['redis-data:/data']);
    assert.ok(compose.volumes && 'redis-data' in compose.volumes, 'named volume redis-data is declared');
    const testCmd = (redis['healthcheck'] as { test: string[] | string }).test;
    assert.match(Array.isArray(testCmd) ? testCmd.join(' ') : testCmd, /redis-cli ping/);
  });

  test('api: built here on ${NODE_IMAGE}, replicas, env, waits for a healthy redis, restarts, publishes nothing', () => {
    assert.deepEqual(api['build'], {
      context: '.',
      args: { NODE_IMAGE: '${NODE_IMAGE:-node:24-bookworm-slim}' },
    });
    assert.equal(api['ports'], undefined, 'only the balancer publishes a port');
    assert.deepEqual(api['deploy'], { replicas: '${API_REPLICAS:-1}' });
    const env = api['environment'] as Record<string, string>;
    assert.equal(env['REDIS_URL'], 'redis://redis:6379');
    // Secrets are Compose secrets read through *_FILE: none is in the container's environment.
    assert.equal(env['API_KEYS_FILE'], '/run/secrets/api_keys');
    assert.equal(env['ANTHROPIC_API_KEY_FILE'], '/run/secrets/anthropic_api_key');
    assert.equal(env['WEBHOOK_SECRET_KEY_FILE'], '/run/secrets/webhook_secret_key');
    assert.equal(env['REDIS_PASSWORD_FILE'], '/run/secrets/redis_password');
    for (const name of ['API_KEYS', 'ANTHROPIC_API_KEY', 'WEBHOOK_SECRET_KEY', 'REDIS_PASSWORD'])
      assert.ok(!(name in env), `${name} is not in the environment`);
    assert.deepEqual(api['secrets'], [
      'api_keys',
      'anthropic_api_key',
      'webhook_secret_key',
      'redis_password',
    ]);
    assert.ok('LOG_LEVEL' in env);
    assert.deepEqual(api['depends_on'], { redis: { condition: 'service_healthy' } });
    assert.equal(api['restart'], 'unless-stopped');
    assert.ok(api['healthcheck'], 'api has a healthcheck');
  });

  test('api: read-only root filesystem, no capabilities, no privilege gain, bounded memory and pids, rotated logs', () => {
    assert.equal(api['read_only'], true);
    assert.deepEqual(api['tmpfs'], ['/tmp']);
    assert.deepEqual(api['cap_drop'], ['ALL']);
    assert.deepEqual(api['security_opt'], ['no-new-privileges:true']);
    assert.match(String(api['mem_limit']), /^\$\{API_MEM_LIMIT:-\d+[mg]\}$/);
    assert.ok(Number(api['pids_limit']) > 0);
    assert.equal(api['logging']?.['driver'], 'json-file');
    assert.ok(api['logging']?.['options']?.['max-size'], 'logs rotate');
  });

  test('redis: bounded memory that refuses writes when full rather than evicting session state', () => {
    const command = ([] as unknown[]).concat(redis['command']).join(' ');
    assert.match(command, /--maxmemory "\$\$\{REDIS_MAXMEMORY\}"\s+--maxmemory-policy noeviction/);
    assert.match(
      String((redis['environment'] as Record<string, string>)['REDIS_MAXMEMORY']),
      /^\$\{REDIS_MAXMEMORY:-\w+\}$/,
    );
  });

  test('lb: HAProxy on ${API_PUBLISH:-3000}, its configuration mounted read-only, hardened like the api', () => {
    const lb = compose.services['lb'] ?? {};
    assert.equal(lb['image'], '${HAPROXY_IMAGE:-haproxy:2.8-alpine}');
    assert.deepEqual(lb['ports'], ['${API_PUBLISH:-3000}:3000']);
    assert.deepEqual(lb['volumes'], ['./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro']);
    assert.equal(lb['read_only'], true);
    assert.deepEqual(lb['cap_drop'], ['ALL']);
    const cfg = read('deploy/haproxy.cfg');
    assert.match(cfg, /^\s*bind :3000$/m);
    assert.match(cfg, /server-template api \d+ api:3000/, 'replicas found by Compose DNS');
    assert.match(cfg, /option httpchk GET \/readyz/, 'health-checked on readiness');
    assert.match(cfg, /timeout tunnel/, 'WebSockets have their own timeout');
  });

  test("api: stop_grace_period is above SHUTDOWN_GRACE_MS's default plus the 5 s close delay", () => {
    const env = api['environment'] as Record<string, string>;
    const grace = Number(/^\$\{SHUTDOWN_GRACE_MS:-(\d+)\}$/.exec(env['SHUTDOWN_GRACE_MS'] ?? '')?.[1]);
    assert.equal(grace, 10_000);
    const period = /^(\d+)s$/.exec(String(api['stop_grace_period']));
    assert.ok(period, `stop_grace_period in seconds: ${String(api['stop_grace_period'])}`);
    assert.ok(
      Number(period[1]) * 1000 > grace + 5000,
      `${String(api['stop_grace_period'])} > ${grace} ms + 5 s`,
    );
  });

  test("api's healthcheck command works", async () => {
    const argv = (api['healthcheck'] as { test: string[] }).test;
    assert.equal(argv[0], 'CMD');
    assert.equal(argv[1], 'node');
    const script = argv[3] ?? '';
    assert.match(script, /http:\/\/127\.0\.0\.1:3000\/healthz/);
    const ok = await healthServer(200);
    try {
      const local = script.replace('127.0.0.1:3000', `127.0.0.1:${ok.port}`);
      assert.equal(await runNodeScript(local, process.env), 0);
    } finally {
      await ok.close();
    }
  });

  describe('validated by docker-compose config', () => {
    const dockerCompose = findExecutable('docker-compose', ['/usr/bin/docker-compose']);
    const skip =
      dockerCompose === null && process.env['CI'] !== 'true'
        ? 'docker-compose not installed (apt-get install docker-compose; .ci/run installs it)'
        : false;
    let envDir = '';
    let emptyEnvFile = '';

    before(async () => {
      envDir = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-compose-'));
      emptyEnvFile = path.join(envDir, 'empty.env');
      await writeFile(emptyEnvFile, '');
    });
    after(async () => {
      if (envDir) await rm(envDir, { recursive: true, force: true });
    });

    /** docker-compose with a controlled environment (and an empty env file, so a developer's .env is ignored). */
    function compose(args: string[], env: Record<string, string>): Promise<{ code: number; out: string }> {
      assert.ok(dockerCompose, 'docker-compose is required under CI (apt-get install docker-compose)');
      const baseEnv: NodeJS.ProcessEnv = {};
      for (const key of ['PATH', 'HOME', 'LANG', 'LC_ALL']) {
        const value = process.env[key];
        if (value !== undefined) baseEnv[key] = value;
      }
      return new Promise((resolve) => {
        execFile(
          dockerCompose,
          ['--env-file', emptyEnvFile, '-f', path.join(root, 'docker-compose.yml'), ...args],
          { cwd: root, env: { ...baseEnv, ...env }, timeout: 60_000 },
          (err, stdout, stderr) => {
            const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
            resolve({ code, out: `${stdout}${stderr}` });
          },
        );
      });
    }

    test('is valid, and resolves as expected: every secret a file under SECRETS_DIR', { skip }, async () => {
      const quiet = await compose(['config', '-q'], {});
      assert.equal(quiet.code, 0, quiet.out);

      const secretsDir = path.join(envDir, 'secrets');
      const resolved = await compose(['config'], { SECRETS_DIR: secretsDir, LOG_LEVEL: 'debug' });
      assert.equal(resolved.code, 0, resolved.out);
      const config = parseYaml(resolved.out) as {
        services: Record<string, Service>;
        secrets: Record<string, { file: string }>;
      };
      const env = config.services['api']?.['environment'] as Record<string, string>;
      assert.equal(env['API_KEYS_FILE'], '/run/secrets/api_keys');
      assert.equal(env['LOG_LEVEL'], 'debug');
      for (const name of ['api_keys', 'anthropic_api_key', 'webhook_secret_key', 'redis_password'])
        assert.equal(config.secrets[name]?.file, path.join(secretsDir, name), `secret ${name}`);
      assert.equal(config.services['api']?.['depends_on']?.['redis']?.['condition'], 'service_healthy');
      const ports = config.services['lb']?.['ports'] as Array<{
        published: number | string;
        target: number;
      }>;
      assert.equal(Number(ports[0]?.published), 3000);
      assert.equal(ports[0]?.target, 3000);
      // The public base images by default.
      assert.equal(config.services['redis']?.['image'], 'redis:7-alpine');
      assert.equal(config.services['api']?.['build']?.['args']?.['NODE_IMAGE'], 'node:24-bookworm-slim');
    });

    test('takes the published address and the base images from the environment', { skip }, async () => {
      const resolved = await compose(['config'], {
        API_PUBLISH: '127.0.0.1:4010',
        NODE_IMAGE: 'local/node:24',
        REDIS_IMAGE: 'local/redis:7',
      });
      assert.equal(resolved.code, 0, resolved.out);
      const config = parseYaml(resolved.out) as { services: Record<string, Service> };
      // docker-compose 1.29 prints a port with a host address in the short form; others in the long form.
      const port = (config.services['lb']?.['ports'] as unknown[])[0];
      const { host_ip, published } =
        typeof port === 'string'
          ? { host_ip: port.split(':')[0], published: port.split(':')[1] }
          : (port as { host_ip?: string; published: number | string });
      assert.equal(host_ip, '127.0.0.1');
      assert.equal(Number(published), 4010);
      assert.equal(config.services['redis']?.['image'], 'local/redis:7');
      assert.equal(config.services['api']?.['build']?.['args']?.['NODE_IMAGE'], 'local/node:24');
    });

    test('rejects an invalid compose file (the validator is real)', { skip }, async () => {
      const bad = path.join(envDir, 'bad.yml');
      await writeFile(bad, 'services:\n  x:\n    image: redis:7-alpine\n    not_an_option: 1\n');
      assert.ok(existsSync(bad));
      const result = await new Promise<{ code: number; out: string }>((resolve) => {
        assert.ok(dockerCompose);
        execFile(dockerCompose, ['-f', bad, 'config', '-q'], { cwd: envDir }, (err, stdout, stderr) =>
          resolve({ code: err ? 1 : 0, out: `${stdout}${stderr}` }),
        );
      });
      assert.notEqual(result.code, 0);
      assert.match(result.out, /not_an_option/);
    });
  });
});
