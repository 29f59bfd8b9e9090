import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { startHarness, type Harness } from './helpers/service.js';
import { text } from '../src/fake/script.js';
import { demoHtml } from '../routes/demo.js';

const CHROMIUM = '/usr/bin/chromium';
const KEY = 'browser-key-1';

describe(
  'browser',
  { skip: !existsSync(CHROMIUM) && `${CHROMIUM} is missing (apt-get install chromium)` },
  () => {
    let h: Harness;
    let browser: Browser;
    before(async () => {
      h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: [
          '--no-sandbox',
          '--disable-gpu',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
          '--no-first-run',
        ],
      });
    });
    after(async () => {
      await browser?.close();
      await h?.close();
    });

    it('a page authenticates with the bearer subprotocol and renders the live text deltas', async () => {
      const reply =
        'Paris is sunny today, and two plus three makes five. The streaming demo shows each delta as it arrives, ' +
        'word by word, while the turn is still running. Anything else?';
      // Slow enough (about 4 s in all) that a page polled on a busy CI machine still sees the text grow.
      h.fake.enqueue(text(reply, { eventDelayMs: 120 }));
      const page = await browser.newPage();
      try {
        // The demo page from the service once routes/demo.ts is registered; until then the same HTML written into a
        // page of the same origin (a real loopback page: Chromium's local-network checks refuse intercepted ones).
        const served = (await fetch(`${h.service.url}/demo`)).status === 200;
        const problems: string[] = [];
        page.on('pageerror', (err) => problems.push(String(err)));
        if (served) await page.goto(`${h.service.url}/demo`);
        else {
          await page.goto(`${h.service.url}/healthz`);
          await page.setContent(demoHtml);
        }
        await page.fill('#key', KEY);
        await page.fill('#prompt', 'Weather in Paris and 2 + 3?');
        await page.click('#start');
        // Text shows up while the turn is still running: deltas are rendered as they arrive.
        await page.waitForFunction(
          () => {
            const box = document.querySelector('.turn[data-iteration="1"]');
            return (
              !!box &&
              box.textContent!.length > 0 &&
              document.getElementById('status')!.textContent === 'running'
            );
          },
          undefined,
          { timeout: 15_000 },
        );
        const partial = await page.textContent('.turn[data-iteration="1"]');
        assert.ok(partial!.length < reply.length, `partial text first: ${partial}`);
        await page.waitForFunction(
          () => document.getElementById('status')!.textContent === 'idle',
          undefined,
          {
            timeout: 15_000,
          },
        );
        assert.equal(await page.textContent('.turn[data-iteration="1"]'), reply);
        const id = await page.textContent('#session');
        const messages = await h.api.get(`/v1/sessions/${id}/messages`);
        assert.equal(messages.body.data.at(-1).content[0].text, reply);
        assert.deepEqual(problems, []);
        const log = await page.textContent('#events');
        assert.match(log!, /ack m1/);
      } finally {
        await page.close();
      }
    });
  },
);
