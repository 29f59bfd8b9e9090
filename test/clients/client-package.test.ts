import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { text } from '../fake/script.js';
import { ROOT } from '../helpers/openapi.js';
import { startHarness, type Harness } from '../helpers/service.js';

const run = promisify(execFile);
const KEY = 'pkg-key-1';
const CLIENT_DIR = path.join(ROOT, 'packages/client');
const NAME = '@toolrunner/sessions-client';
const SERVER_DEPS = ['fastify', 'ioredis', '@anthropic-ai/sdk', 'zod', 'pino'];

/** Every package name under a node_modules folder (scoped ones as `@scope/name`), nested ones included. */
function installedNames(dir: string): string[] {
  const names: string[] = [];
  const walk = (nm: string) => {
    let entries: string[];
    try {
      entries = readdirSync(nm);
    } catch {
      return;
    }
    for (const e of entries) {
      if (e.startsWith('.')) continue;
      const scoped = e.startsWith('@') ? readdirSync(path.join(nm, e)).map((n) => `${e}/${n}`) : [e];
      for (const n of scoped) {
        names.push(n);
        walk(path.join(nm, n, 'node_modules'));
      }
    }
  };
  walk(path.join(dir, 'node_modules'));
  return names;
}

/** The consumer: imports the installed package by name, creates a session, waits for it, prints the result. */
const SCRIPT = `
import { SessionsClient } from '${NAME}';
const client = new SessionsClient({ baseUrl: process.env.SERVICE_URL, apiKey: process.env.SERVICE_KEY });
const created = await client.createSession({ input: 'hi from a scratch project' });
const done = await client.waitFor(created.id, 'idle', { timeoutMs: 60000 });
console.log(JSON.stringify({ resolved: import.meta.resolve('${NAME}'), status: done.status, stop_reason: done.stop_reason }));
`;

describe('the client package: npm pack, then a scratch project installs the tarball offline and runs it', () => {
  let h: Harness;
  let work: string;
  let scratch: string;
  let tarball: string;
  before(async () => {
    work = mkdtempSync(path.join(tmpdir(), 'client-pkg-'));
    // `prepare` builds packages/client/dist (tsc + the esbuild browser bundle) before npm packs it.
    await run('npm', ['pack', '--pack-destination', work], { cwd: CLIENT_DIR, maxBuffer: 16 << 20 });
    const tgz = readdirSync(work).filter((f) => f.endsWith('.tgz'));
    assert.equal(tgz.length, 1, `one tarball in ${work}: ${tgz.join(', ')}`);
    tarball = path.join(work, tgz[0]!);
    scratch = path.join(work, 'scratch');
    mkdirSync(scratch);
    writeFileSync(
      path.join(scratch, 'package.json'),
      JSON.stringify({ name: 'scratch', private: true, type: 'module' }),
    );
    writeFileSync(path.join(scratch, 'main.js'), SCRIPT);
    const install = (mode: string) =>
      run('npm', ['install', mode, '--no-audit', '--no-fund', tarball], {
        cwd: scratch,
        maxBuffer: 16 << 20,
      });
    await install('--offline').catch(() => install('--prefer-offline'));
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(async () => {
    await h?.close();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('the tarball ships the built dist/ (ES modules, .d.ts, the browser bundle) and no sources', async () => {
    const { stdout } = await run('tar', ['-tzf', tarball]);
    const files = stdout.trim().split('\n');
    for (const f of [
      'dist/index.js',
      'dist/index.d.ts',
      'dist/browser.js',
      'dist/tool-worker.js',
      'package.json',
    ]) {
      assert.ok(files.includes(`package/${f}`), `${f} in ${files.join(', ')}`);
    }
    assert.ok(!files.some((f) => f.startsWith('package/src/')), 'no TypeScript sources');
  });

  it('the installed package depends on openapi-fetch and standardwebhooks only, and pulls no server package', () => {
    const pkgDir = path.join(scratch, 'node_modules', NAME);
    const pkg = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
    };
    assert.deepEqual(Object.keys(pkg.dependencies ?? {}).sort(), ['openapi-fetch', 'standardwebhooks']);
    const names = installedNames(scratch);
    assert.ok(names.includes(NAME) && names.includes('openapi-fetch'), names.join(', '));
    for (const dep of SERVER_DEPS) assert.ok(!names.includes(dep), `${dep} installed: ${names.join(', ')}`);
    assert.ok(names.length < 10, `a handful of packages, not the server's: ${names.join(', ')}`);
  });

  it('a Node ESM script imports the package by name, creates a session and waits for it to end', async () => {
    h.fake.enqueue(text('Installed from a tarball.'));
    const { stdout } = await run(process.execPath, ['main.js'], {
      cwd: scratch,
      env: { ...process.env, SERVICE_URL: h.service.url, SERVICE_KEY: KEY },
    });
    const out = JSON.parse(stdout.trim()) as { resolved: string; status: string; stop_reason: string | null };
    assert.match(out.resolved, /\/scratch\/node_modules\/@toolrunner\/sessions-client\/dist\/index\.js$/);
    assert.equal(out.status, 'idle');
    assert.equal(out.stop_reason, 'end_turn');
  });
});
