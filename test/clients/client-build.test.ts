import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { Webhook } from 'standardwebhooks';
import { text } from '../fake/script.js';
import { ROOT } from '../helpers/openapi.js';
import { startHarness, type Harness } from '../helpers/service.js';

const CHROMIUM = '/usr/bin/chromium';
const KEY = 'build-key-1';

/** `npm run build:client`, without npm: tsc to dist/client, esbuild to dist/client/browser.js. */
function buildClient(): void {
  const run = (cmd: string, args: string[]) => {
    const out = spawnSync(cmd, args, { cwd: ROOT, encoding: 'utf8' });
    if (out.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${out.stdout}${out.stderr}`);
  };
  const script = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts['build:client'];
  assert.match(
    script,
    /^tsc -p packages\/client\/tsconfig\.json && esbuild packages\/client\/src\/index\.ts /,
  );
  run(process.execPath, [
    path.join(ROOT, 'node_modules/typescript/bin/tsc'),
    '-p',
    'packages/client/tsconfig.json',
  ]);
  run(path.join(ROOT, 'node_modules/.bin/esbuild'), script.split(' && ')[1].split(' ').slice(1));
}

describe('the built client: the package subpath in Node, the browser bundle in Chromium', () => {
  let h: Harness;
  let browser: Browser | undefined;
  before(async () => {
    buildClient();
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(async () => {
    await browser?.close();
    await h?.close();
  });

  it('`toolrunner-sessions/client` resolves through package.json exports to the compiled ES module', async () => {
    // Through the package name (a self-reference), not a relative path: what a consumer's import resolves to.
    const specifier = 'toolrunner-sessions/client';
    const mod = (await import(specifier)) as typeof import('../../packages/client/src/index.js');
    assert.match(import.meta.resolve(specifier), /\/dist\/client\/index\.js$/);
    assert.equal(typeof mod.SessionsClient, 'function');
    assert.equal(typeof mod.verifyWebhook, 'function');
    h.fake.enqueue(text('From the package.'));
    const client = new mod.SessionsClient({ baseUrl: h.service.url, apiKey: KEY });
    const s = await client.createSession({ input: 'hi' });
    assert.equal(s.object, 'session');
    assert.ok(existsSync(path.join(ROOT, 'dist/client/index.d.ts')));
  });

  it(
    'the browser bundle creates, follows and waits for a session, and verifies a webhook, in Chromium',
    { skip: !existsSync(CHROMIUM) && `${CHROMIUM} is missing (apt-get install chromium)` },
    async () => {
      const bundle = readFileSync(path.join(ROOT, 'dist/client/browser.js'), 'utf8');
      assert.doesNotMatch(bundle, /\bfrom ["']node:|require\(["']node:/, 'no Node-only imports');
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
      });
      // The service's pages carry a CSP (helmet) that forbids the blob: module this test loads the bundle from.
      const context = await browser.newContext({ bypassCSP: true });
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('pageerror', (err) => problems.push(String(err)));
      // A page of the service's origin (same-origin fetch and WebSocket, no CORS needed).
      await page.goto(`${h.service.url}/healthz`);
      h.fake.enqueue(text('Streamed to a browser, word by word, as it comes.', { eventDelayMs: 5 }));
      const secret = `whsec_${Buffer.from('browser webhook secret!!').toString('base64')}`;
      const now = new Date();
      const body = JSON.stringify({ id: '1-0', session_id: 'ses_x', type: 'session.status', data: {} });
      const signature = new Webhook(secret).sign('msg_b', now, body);
      const result = await page.evaluate(
        async ({ bundle, baseUrl, key, secret, body, signature, ts }) => {
          const url = URL.createObjectURL(new Blob([bundle], { type: 'text/javascript' }));
          const m = await import(url);
          const client = new m.SessionsClient({ baseUrl, apiKey: key });
          const s = await client.createSession({ input: 'Hello from Chromium' });
          const types: string[] = [];
          for await (const ev of client.follow(s.id)) {
            types.push(ev.type);
            if (ev.type === 'session.status' && ev.data.status === 'idle') break;
          }
          const done = await client.waitFor(s.id, 'idle');
          let notFound = '';
          try {
            await client.getSession('ses_doesnotexist0000');
          } catch (err) {
            notFound = `${(err as { name: string }).name} ${(err as { code: string }).code}`;
          }
          const headers = { 'webhook-id': 'msg_b', 'webhook-timestamp': ts, 'webhook-signature': signature };
          const verified = m.verifyWebhook(secret, body, headers).type;
          return { types, status: done.status, notFound, verified };
        },
        {
          bundle,
          baseUrl: h.service.url,
          key: KEY,
          secret,
          body,
          signature,
          ts: String(Math.floor(now.getTime() / 1000)),
        },
      );
      assert.equal(result.status, 'idle');
      assert.ok(result.types.includes('stream.event'), result.types.join(','));
      assert.equal(result.types.at(-1), 'session.status');
      assert.equal(result.notFound, 'NotFoundError session_not_found');
      assert.equal(result.verified, 'session.status');
      assert.deepEqual(problems, []);
    },
  );
});
