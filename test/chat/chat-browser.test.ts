/**
 * A minimal chat page in Chromium: the `ai` package's Chat with DefaultChatTransport pointed at the service's
 * /v1/chat (test/fixtures/chat-page.ts, bundled here with esbuild; no React), from a page of another origin
 * (CORS_ORIGINS). A question calls get_weather under `approval: "always"`; the page shows the approval request,
 * approves it with addToolApprovalResponse, and shows the answer the run goes on to.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { startHarness, type Harness } from '../helpers/service.js';

const CHROMIUM = '/usr/bin/chromium';
const ROOT = path.join(import.meta.dirname, '../..');
const KEY = 'chat-browser-key';
const WAIT = { timeout: 30_000 };

const HTML =
  '<!doctype html><meta charset="utf-8"><title>chat</title><link rel="icon" href="data:,">' +
  '<ul id="messages"></ul><form><input name="q" aria-label="message"><button>Send</button></form>' +
  '<button id="approve" type="button">Approve</button><script type="module" src="/page.js"></script>';

/** The page's bundle, built into a temporary folder. */
function bundle(): { js: string; cleanup(): void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'chat-page-'));
  const out = path.join(dir, 'page.js');
  const r = spawnSync(
    path.join(ROOT, 'node_modules/.bin/esbuild'),
    [
      'test/fixtures/chat-page.ts',
      '--bundle',
      '--format=esm',
      '--platform=browser',
      '--target=es2022',
      `--outfile=${out}`,
    ],
    { cwd: ROOT, encoding: 'utf8' },
  );
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  return { js: readFileSync(out, 'utf8'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

async function pageServer(js: string) {
  const server = http.createServer((req, res) => {
    if (req.url === '/page.js') {
      res.writeHead(200, { 'content-type': 'text/javascript' });
      return void res.end(js);
    }
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(HTML);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe(
  'a chat page with the ai package in Chromium',
  { skip: !existsSync(CHROMIUM) && `${CHROMIUM} is missing (apt-get install chromium)` },
  () => {
    let h: Harness;
    let browser: Browser;
    let page: Awaited<ReturnType<typeof pageServer>>;
    let built: ReturnType<typeof bundle>;
    before(async () => {
      built = bundle();
      page = await pageServer(built.js);
      h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, CORS_ORIGINS: page.url } });
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: [
          '--headless',
          '--no-sandbox',
          '--disable-gpu',
          '--no-first-run',
          '--disable-background-networking',
        ],
      });
    });
    after(async () => {
      await browser?.close();
      await h?.close();
      await page?.close();
      built?.cleanup();
    });

    test('useChat-style flow: a question, the approval request, approve, the answer', async () => {
      const s = await h.api.post('/v1/sessions', {
        params: { model: 'claude-test', max_tokens: 256 },
        tools: ['get_weather'],
        approval: 'always',
        start: false,
      });
      assert.equal(s.status, 201);
      const tab = await browser.newPage();
      const errors: string[] = [];
      tab.on('pageerror', (e) => errors.push(String(e)));
      const hash = new URLSearchParams({ api: h.service.url, session: s.body.id, key: KEY });
      await tab.goto(`${page.url}/#${hash}`);
      await tab.fill('input', 'What is the weather in Paris?');
      await tab.click('form button');
      const assistant = 'li[data-role="assistant"]';
      await tab.waitForSelector(`${assistant}:has-text("[tool-get_weather:approval-requested]")`, WAIT);
      await tab.waitForSelector('body[data-status="ready"]', WAIT);
      await tab.click('#approve');
      await tab.waitForSelector(`${assistant}:has-text("The weather in Paris is")`, WAIT);
      await tab.waitForSelector('body[data-status="ready"]', WAIT);
      const items = await tab.$$eval('#messages li', (lis) =>
        lis.map((li) => [li.dataset['role'], li.textContent]),
      );
      assert.equal(items.length, 2, JSON.stringify(items));
      assert.equal(items[0]![1], 'What is the weather in Paris?');
      assert.match(items[1]![1]!, /\[tool-get_weather:output-available\].*The weather in Paris is/);
      assert.deepEqual(errors, []);
      assert.equal((await h.api.get(`/v1/sessions/${s.body.id}`)).body.status, 'idle');
    });
  },
);
