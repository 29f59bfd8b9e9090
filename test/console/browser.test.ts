/**
 * The console in real Chromium against the service and the fake upstream: a whole steered session (create with a
 * tool needing approval, edit and approve, a client tool's result, a streamed answer, a follow-up, a fork, a cancel),
 * a network cut with nothing missed or repeated after it, and pages of listed and unlisted origins (CORS and the
 * WebSocket Origin check). Every wait is on a DOM state or the session's state, never a fixed delay.
 *
 * Screenshots (session list, waiting for approval, streamed answer) go to `.data/screenshots/`, or to `docs/` with
 * UPDATE_SCREENSHOTS=1 (how the ones linked from the README were made).
 */
import { after, before, beforeEach, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { existsSync, mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type BrowserContext, type Page, type Request } from 'playwright-core';
import NodeWebSocket from 'ws';
import { RUNS_KEY } from '../../src/store/keys.js';
import { startHarness, type Harness } from '../helpers/service.js';
import {
  apiError,
  hang,
  reply,
  text,
  textBlock,
  thinking,
  toolCall,
  toolCalls,
  toolUse,
} from '../fake/script.js';

const CHROMIUM = '/usr/bin/chromium';
const KEY = 'browser-key-1';
const WAIT = { timeout: 30_000 };
const SHOTS = process.env['UPDATE_SCREENSHOTS'] === '1' ? 'docs' : '.data/screenshots';

/** A page server on loopback: one blank HTML page, so a test page has an origin of its own. */
async function startPageServer(): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>other origin</title><link rel="icon" href="data:,"><p>other origin</p>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Every event of a session over REST, page by page. */
async function allEventIds(h: Harness, id: string): Promise<string[]> {
  const ids: string[] = [];
  let after = '';
  while (true) {
    const r = await h.api.get(`/v1/sessions/${id}/events?limit=1000${after ? `&after=${after}` : ''}`);
    assert.equal(r.status, 200);
    ids.push(...r.body.data.map((e: { id: string }) => e.id));
    if (!r.body.has_more) return ids;
    after = r.body.next_cursor;
  }
}

/** The event ids the page lists in its raw panel (opening it first). */
async function pageEventIds(page: Page): Promise<string[]> {
  const open = await page.$eval('details.events', (d) => (d as HTMLDetailsElement).open);
  if (!open) await page.click('details.events > summary');
  await page.waitForSelector('.event-list li[data-id]', WAIT);
  return page.$$eval('.event-list li[data-id]', (lis) => lis.map((li) => li.getAttribute('data-id')!));
}

/** What a failure report may add to the error's message: the CI's summary shows the message, not diagnostics. */
const REPORT_MAX_CHARS = 6000;

/**
 * A failed flow: how the page looked (`.data/screenshots/failed-<flow>-<time>.png`, which later runs do not
 * overwrite), the session list's text, every error the page shows (wherever it is scrolled), the composer's state, the
 * page's last steering calls and what came of them (`steered`: see `steeringCalls`), the service's answers of 400 and
 * up, what the fake upstream still holds and its last requests, and the session as the service holds it (and its run,
 * as the engine holds it) with its last events, so that the failure says more than its timeout. Each line is a
 * diagnostic and is added to `err`'s message (the failing-tests summary shows only that); returns `err`. (What the
 * page logged is listed after every flow.)
 */
async function explainFailure(
  t: TestContext,
  page: Page,
  err: unknown,
  about: { h?: Harness; session?: string | undefined; steered?: () => string[] } = {},
): Promise<unknown> {
  const { h, session, steered } = about;
  const name = t.name.slice(0, 24).replace(/\W+/g, '-');
  await page
    .screenshot({ path: `.data/screenshots/failed-${name}-${Date.now()}.png` })
    .catch(() => undefined);
  const lines: string[] = [];
  const said = (what: string, v: unknown) => {
    const line = `${what}: ${typeof v === 'string' ? v : JSON.stringify(v)}`;
    lines.push(line);
    t.diagnostic(line);
  };
  said('session list', await page.textContent('.sessions').catch((e: unknown) => String(e)));
  said(
    'page errors',
    await page
      .$$eval('[role="alert"]', (els) => els.map((e) => e.textContent?.trim()))
      .catch((e: unknown) => String(e)),
  );
  said(
    'composer',
    await page
      .evaluate(() => ({
        text: document.querySelector<HTMLTextAreaElement>('#composer-text')?.value,
        interrupt: document.querySelector<HTMLInputElement>('#composer-interrupt')?.checked,
        sendDisabled: document.querySelector<HTMLButtonElement>('form.composer button[type="submit"]')
          ?.disabled,
        status: document.querySelector('article.session')?.getAttribute('data-status'),
        conn: document.querySelector('.conn')?.getAttribute('data-conn'),
      }))
      .catch((e: unknown) => String(e)),
  );
  if (steered) said('steering calls', steered());
  if (h) {
    said(
      'answers of 400 and up',
      h.answers.answers().filter((a) => a.status >= 400),
    );
    said('fake', {
      queued: h.fake.queued,
      requests: h.fake.requests.length,
      last: h.fake.requests.slice(-3).map((r) => ({
        at: new Date(r.at).toISOString(),
        status: r.status ?? null,
        messages: r.messages.length,
        last: JSON.stringify(r.messages.at(-1)?.content ?? null).slice(0, 120),
      })),
    });
    if (session) await sessionReport(h, session, said);
  }
  if (!(err instanceof Error)) return err;
  const report = lines.join('\n').slice(0, REPORT_MAX_CHARS);
  // The stack too: the summary prints it, and it was made with the message as it was.
  err.message = `${err.message}\n${report}`;
  err.stack = `${err.stack ?? ''}\n${report}`;
  return err;
}

/** The session as the service holds it, and its last events (type, revision, a bit of data). */
async function sessionReport(h: Harness, id: string, said: (what: string, v: unknown) => void) {
  try {
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    said('session', {
      status: s.status,
      revision: s.revision,
      iteration: s.iteration,
      stop_reason: s.stop_reason,
      error: s.error,
      updated_at: s.updated_at,
    });
    // Whose run it is: a `running` session that no process runs, with no lease and no due entry, is one nothing will
    // ever claim; one that runs here all along is a run that stalls. Due times are of Redis's clock, this machine's.
    const { engine, store, redis } = h.service.app;
    const due = await redis.zscore(RUNS_KEY, id);
    said('run', {
      running_here: engine.isRunningHere(id),
      lease: await store.runs.leaseHolder(id),
      due_in_ms: due === null ? null : Math.round(Number(due) - Date.now()),
    });
    const events = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data ?? [];
    said(
      'events',
      events
        .filter((e: { type: string }) => e.type !== 'stream.event')
        .slice(-25)
        .map(
          (e: { type: string; revision?: number; data?: unknown }) =>
            `${e.revision ?? '-'} ${e.type} ${JSON.stringify(e.data ?? null).slice(0, 80)}`,
        ),
    );
  } catch (e) {
    said('session report failed', String(e));
  }
}

/**
 * The steering calls the page sends (every request but a read: POST, PUT, PATCH, DELETE), oldest first, each as
 * `time METHOD path → outcome`: its status, the browser's failure, or `no answer` while none came. (Not its body:
 * Playwright shows none for the typed client's requests.) A flow that waits for what a call causes then tells
 * a call never sent, or never answered, from one the service took and did nothing with. Returns the function that
 * lists the last 8.
 */
function steeringCalls(page: Page): () => string[] {
  const calls = new Map<Request, { at: number; outcome: string }>();
  page.on('request', (r) => {
    if (r.method() !== 'GET' && r.method() !== 'HEAD' && r.method() !== 'OPTIONS')
      calls.set(r, { at: Date.now(), outcome: 'no answer' });
  });
  page.on('response', (r) => {
    const call = calls.get(r.request());
    if (call) call.outcome = String(r.status());
  });
  page.on('requestfailed', (r) => {
    const call = calls.get(r);
    if (call) call.outcome = `failed: ${r.failure()?.errorText ?? 'unknown'}`;
  });
  return () =>
    [...calls]
      .slice(-8)
      .map(
        ([r, { at, outcome }]) =>
          `${new Date(at).toISOString()} ${r.method()} ${new URL(r.url()).pathname} → ${outcome}`,
      );
}

/**
 * The answers of 400 and up a page gets, as `METHOD url → status` lines: not problems in themselves (the typed client
 * retries some), but what a failed flow needs to say why.
 */
function refusals(page: Page): string[] {
  const refused: string[] = [];
  page.on('response', (r) => {
    if (r.status() >= 400) refused.push(`${r.request().method()} ${r.url()} → ${r.status()}`);
  });
  return refused;
}

const sessionStatus = (page: Page, status: string) =>
  page.waitForSelector(`article.session[data-status="${status}"]`, WAIT);

/** The width the page needs, compared with its viewport's. */
const overflow = (page: Page) =>
  page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);

describe(
  'browser console',
  { skip: !existsSync(CHROMIUM) && `${CHROMIUM} is missing (apt-get install chromium)` },
  () => {
    let h: Harness;
    let browser: Browser;
    let listed: Awaited<ReturnType<typeof startPageServer>>;
    let unlisted: Awaited<ReturnType<typeof startPageServer>>;
    before(async () => {
      listed = await startPageServer();
      unlisted = await startPageServer();
      h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, CORS_ORIGINS: listed.url } });
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: [
          '--headless',
          '--no-sandbox',
          '--disable-gpu',
          '--no-first-run',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
        ],
      });
      mkdirSync(SHOTS, { recursive: true });
    });
    // A flow that failed leaves its queued replies: the next flow's turns would take them and fail too.
    beforeEach(() => h.fake.reset());
    after(async () => {
      await browser?.close();
      await h?.close();
      await listed?.close();
      await unlisted?.close();
    });

    it('drives a whole steered session, then resumes after a network cut with nothing missed or repeated', async (t) => {
      // The console's one API layer is the typed client's browser build.
      const layer = await (await fetch(`${h.service.url}/console/api.js`)).text();
      assert.match(layer, /from '\.\/vendor\/client\.js'/);
      const client = await fetch(`${h.service.url}/console/vendor/client.js`);
      assert.equal(client.status, 200);
      assert.match(await client.text(), /SessionsClient/);
      const context: BrowserContext = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
      const page = await context.newPage();
      const problems: string[] = [];
      // While the network is cut, Chromium reports the requests that were on their way as failed: that is the cut
      // itself, not a problem of the page. Anything else logged counts.
      let offline = false;
      const problem = (line: string) => {
        if (!(offline && line.includes('net::ERR_INTERNET_DISCONNECTED'))) problems.push(line);
      };
      page.on('pageerror', (err) => problem(`pageerror: ${String(err)}`));
      page.on('requestfailed', (r) => problem(`requestfailed: ${r.url()} ${r.failure()?.errorText}`));
      const refused = refusals(page);
      const steered = steeringCalls(page);
      page.on('console', (m) => {
        if (m.type() === 'error' || m.type() === 'warning')
          problem(`${m.type()}: ${m.text()} ${m.location().url}`);
      });
      let watched: string | undefined;
      try {
        // /demo redirects to the console, served with its CSP.
        const res = await page.goto(`${h.service.url}/demo`);
        assert.equal(new URL(page.url()).pathname, '/console');
        const csp = res!.headers()['content-security-policy']!;
        assert.match(csp, /default-src 'none'/);
        assert.match(csp, /script-src 'self' 'sha256-/);
        assert.match(csp, /connect-src 'self'/);

        // The key goes to sessionStorage, never into the URL.
        await page.fill('#api-key', KEY);
        await page.keyboard.press('Enter');
        await page.waitForSelector('#new-input', WAIT);
        assert.equal(await page.evaluate(() => sessionStorage.getItem('toolrunner-sessions.key')), KEY);
        assert.ok(!page.url().includes(KEY));

        // Create: a server tool that needs approval, a client tool, a system prompt.
        h.fake.enqueue(toolCall('get_weather', { location: 'Paris' }));
        await page.fill('#new-input', 'What is the weather in Paris, and where is order 1234?');
        await page.fill('#new-system', 'You are a concise assistant.');
        await page.check('input[name="tool"][value="get_weather"]');
        await page.fill(
          '#new-client-tools',
          JSON.stringify({
            name: 'lookup_order',
            description: 'Find an order',
            input_schema: { type: 'object', properties: { order_id: { type: 'string' } } },
          }),
        );
        await page.selectOption('#new-approval', 'always');
        await page.click('button:has-text("Create session")');

        const card = await page.waitForSelector(
          '.tool-card[data-tool="get_weather"][data-state="awaiting_approval"]',
          WAIT,
        );
        const id = (await page.getAttribute('article.session', 'data-session'))!;
        watched = id;
        assert.match(id, /^ses_/);
        assert.ok(page.url().endsWith(`#/sessions/${id}`));
        await page.waitForSelector(
          `.session-list li[data-session="${id}"][data-status="requires_action"]`,
          WAIT,
        );
        assert.match((await page.textContent('.required'))!, /wait.* for approval/);
        assert.match((await card.textContent())!, /"location": "Paris"/);
        await page.screenshot({ path: `${SHOTS}/console-approval.png` });
        const created = await h.api.get(`/v1/sessions/${id}`);
        assert.equal(created.body.params.system, 'You are a concise assistant.');
        assert.equal(created.body.approval, 'always');

        // Edit the input, then approve: the tool runs with the edited input; the model then calls the client tool.
        h.fake.enqueue(toolCall('lookup_order', { order_id: '1234' }));
        // Acted on by selector, never through a handle: the card re-renders (its state moves on) between steps.
        await page.click('.tool-card[data-tool="get_weather"][data-state="awaiting_approval"] button.edit');
        await page.fill(
          '.tool-card[data-tool="get_weather"] textarea.edit-input',
          '{"location": "Paris, France"}',
        );
        await page.click('.tool-card[data-tool="get_weather"] button.approve-edited');
        await page.waitForSelector(
          '.tool-card[data-tool="lookup_order"][data-state="awaiting_result"]',
          WAIT,
        );
        const weather = await page.waitForSelector(
          '.tool-card[data-tool="get_weather"][data-state="done"]',
          WAIT,
        );
        assert.match((await weather.textContent())!, /"location": "Paris, France"/);
        assert.match((await weather.textContent())!, /Simulated weather in Paris, France/);

        // Submit the client tool's result: the answer streams.
        const answer =
          'It is cloudy in Paris, and order 1234 has shipped. Each word of this answer streams as its own delta, ' +
          'so the page shows the text growing while the turn is still running.';
        h.fake.enqueue(text(answer, { eventDelayMs: 120 }));
        const draft = page.locator('.tool-card[data-tool="lookup_order"] textarea.result-draft');
        await draft.focus();
        await page.keyboard.type('Order 1234: shipped');
        // Nothing the stream delivers meanwhile re-creates the field (what is typed would be lost).
        assert.equal(await draft.inputValue(), 'Order 1234: shipped');
        // Every text a streaming turn showed, recorded on each change of the page (not sampled by a poll, which a
        // loaded machine may let run only after the last delta).
        await page.evaluate(() => {
          const shown: string[] = [];
          Object.assign(window, { streamedTexts: shown });
          new MutationObserver(() => {
            for (const el of document.querySelectorAll('.turn.assistant.streaming .text'))
              shown.push(el.textContent ?? '');
          }).observe(document.body, { subtree: true, childList: true, characterData: true });
        });
        await page.click('.tool-card[data-tool="lookup_order"] button.submit-result');
        // The text grows while the turn is still running: a part of at least 4 words is shown first.
        await page.waitForFunction(
          (full) =>
            (window as unknown as { streamedTexts: string[] }).streamedTexts.some(
              (t) => t.split(' ').length >= 4 && t.length < full.length && full.startsWith(t),
            ),
          answer,
          WAIT,
        );
        await page.screenshot({ path: `${SHOTS}/console-streaming.png` });
        await sessionStatus(page, 'idle');
        await page.waitForFunction(
          (t) => [...document.querySelectorAll('.turn.assistant .text')].some((e) => e.textContent === t),
          answer,
          WAIT,
        );

        // A follow-up, sent with the keyboard (Ctrl+Enter).
        h.fake.enqueue(text('Tokyo is rainy.'));
        await page.focus('#composer-text');
        await page.keyboard.type('And in Tokyo?');
        await page.keyboard.press('Control+Enter');
        await page.waitForFunction(
          () =>
            [...document.querySelectorAll('.turn.assistant .text')].some(
              (e) => e.textContent === 'Tokyo is rainy.',
            ),
          undefined,
          WAIT,
        );
        await sessionStatus(page, 'idle');
        assert.match((await page.textContent('.conversation'))!, /And in Tokyo\?/);

        // The history over REST is what the page showed: the edited call, the submitted result, both answers.
        const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
        const blocks = history.flatMap((m: any) => (typeof m.content === 'string' ? [] : m.content));
        const weatherUse = blocks.find((b: any) => b.type === 'tool_use' && b.name === 'get_weather');
        assert.deepEqual(weatherUse.input, { location: 'Paris, France' });
        const orderUse = blocks.find((b: any) => b.type === 'tool_use' && b.name === 'lookup_order');
        const orderResult = blocks.find(
          (b: any) => b.type === 'tool_result' && b.tool_use_id === orderUse.id,
        );
        assert.equal(orderResult.content, 'Order 1234: shipped');
        assert.equal(history.at(-1).content[0].text, 'Tokyo is rainy.');
        const session = (await h.api.get(`/v1/sessions/${id}`)).body;
        assert.equal(session.iteration, 4);
        // The figures follow the session: turns and usage as REST tells them.
        await page.waitForFunction(
          ({ n, out }) =>
            document.querySelector('.figures .iteration')?.textContent === n &&
            document.querySelector('.figures .usage-output')?.textContent === out,
          { n: '4', out: session.usage.output_tokens.toLocaleString('en-US') },
          WAIT,
        );
        assert.match((await page.textContent('.figures .cost'))!, /^\$\d/);
        // Each turn shows its time and cost (from the iteration records).
        await page.waitForFunction(
          () =>
            [...document.querySelectorAll('.turn.assistant .turn-figures')].filter((e) =>
              /^\d+(\.\d)? m?s · \$\d/.test(e.textContent ?? ''),
            ).length === 4,
          undefined,
          WAIT,
        );

        // Fork at iteration 2 (after the client tool's result): the page opens the fork.
        await page.fill('#fork-at', '2');
        await page.click('button.fork');
        await page.waitForFunction(
          (orig) => location.hash.startsWith('#/sessions/') && !location.hash.endsWith(orig),
          id,
          WAIT,
        );
        const forkId = (await page.evaluate(() => location.hash.split('/').at(-1)))!;
        await page.waitForSelector(`article.session[data-session="${forkId}"][data-status="idle"]`, WAIT);
        const forkHistory = (await h.api.get(`/v1/sessions/${forkId}/messages`)).body.data;
        assert.deepEqual(forkHistory, history.slice(0, forkHistory.length));
        assert.equal(forkHistory.at(-1).content[0].type, 'tool_result');
        await page.waitForSelector('.tool-card[data-tool="lookup_order"][data-state="done"]', WAIT);

        // Cancel a run in the fork: the turn in flight hangs until the cancel aborts it.
        h.fake.enqueue(hang());
        await page.fill('#composer-text', 'Summarize, please.');
        await page.click('form.composer button[type="submit"]');
        await sessionStatus(page, 'running');
        await page.waitForSelector('button.cancel:not([disabled])', WAIT);
        await page.click('button.cancel');
        await sessionStatus(page, 'idle');
        await page.waitForSelector('.stopped:has-text("cancelled")', WAIT);
        const cancelled = (await h.api.get(`/v1/sessions/${forkId}`)).body;
        assert.equal(cancelled.status, 'idle');
        assert.equal(cancelled.stop_reason, 'cancelled');

        // The session list shows both sessions with their statuses.
        await page.waitForSelector(`.session-list li[data-session="${forkId}"][data-status="idle"]`, WAIT);
        await page.waitForSelector(`.session-list li[data-session="${id}"][data-status="idle"]`, WAIT);

        // Back to the first session; cut the network; the session moves on meanwhile (over REST).
        await page.click(`.session-list li[data-session="${id}"] a`);
        await page.waitForSelector(`article.session[data-session="${id}"] .conn[data-conn="live"]`, WAIT);
        offline = true;
        await context.setOffline(true);
        await page.waitForSelector('.conn[data-conn="offline"]', WAIT);
        const offlineAnswer = 'While you were away: the weather in Paris cleared up and Tokyo stayed rainy.';
        h.fake.enqueue(text(offlineAnswer, { eventDelayMs: 20 }));
        const posted = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Anything new?' });
        assert.equal(posted.status, 202);
        await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 5, 30_000);
        assert.equal(await page.getAttribute('.conn', 'data-conn'), 'offline');
        await context.setOffline(false);
        await page.waitForSelector('.conn[data-conn="live"]', WAIT);
        offline = false;
        await page.waitForFunction(
          (t) => [...document.querySelectorAll('.turn.assistant .text')].some((e) => e.textContent === t),
          offlineAnswer,
          WAIT,
        );
        await page.waitForSelector('.turn.user:not(.queued) .text:has-text("Anything new?")', WAIT);
        // Every event of the log, once each, in order.
        const rest = await allEventIds(h, id);
        await page.waitForFunction(
          (n) => Number(document.querySelector('.event-count')?.getAttribute('data-count')) >= n,
          rest.length,
          WAIT,
        );
        assert.deepEqual(await pageEventIds(page), rest);
        assert.equal(
          await page.$$eval(
            '.turn.assistant .text',
            (els, t) => els.filter((e) => e.textContent === t).length,
            offlineAnswer,
          ),
          1,
        );

        // Readable at 1440 px and at 360 px: nothing wider than the viewport.
        assert.ok((await overflow(page)) <= 0, 'no horizontal overflow at 1440 px');
        await page.setViewportSize({ width: 360, height: 780 });
        assert.ok((await overflow(page)) <= 0, 'no horizontal overflow at 360 px');
        await page.setViewportSize({ width: 1440, height: 1000 });
        await page.goto(`${h.service.url}/console#/`);
        await page.waitForSelector(`.session-list li[data-session="${forkId}"]`, WAIT);
        await page.screenshot({ path: `${SHOTS}/console-sessions.png` });

        // The search box: text filters the page listed (by id); key=value asks the service (the fork's forked_from).
        const listed = () => page.$$eval('.session-list li', (lis) => lis.map((li) => li.dataset['session']));
        const search = page.getByRole('searchbox', { name: 'Search sessions' });
        await search.fill(forkId.slice(4).toLowerCase());
        await page.waitForFunction(
          () => document.querySelectorAll('.session-list li').length === 1,
          undefined,
          WAIT,
        );
        assert.deepEqual(await listed(), [forkId]);
        await search.fill(`forked_from=${id}`);
        await page.waitForSelector(`.session-list li[data-session="${forkId}"]`, WAIT);
        await page.waitForFunction(
          () => document.querySelectorAll('.session-list li').length === 1,
          undefined,
          WAIT,
        );
        assert.deepEqual(await listed(), [forkId]);
        await search.fill('no such session');
        await page.waitForSelector('.sessions p.muted:has-text("No session matches.")', WAIT);
        await search.fill('');
        await page.waitForSelector(`.session-list li[data-session="${id}"]`, WAIT);

        // Compact: the history then starts with the summary, and the session is idle again.
        await page.click(`.session-list li[data-session="${id}"] a`);
        await sessionStatus(page, 'idle');
        await page.waitForSelector('button.compact:not([disabled])', WAIT);
        await page.click('button.compact');
        await page.waitForSelector('.conversation .compaction', WAIT);
        await sessionStatus(page, 'idle');
        const compacted = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
        assert.equal(compacted[0].content[0].type, 'compaction');

        // The favicon loads and the page logged nothing (no CSP violation, no failed request, no error).
        assert.equal((await fetch(`${h.service.url}/console/favicon.svg`)).status, 200);
        assert.deepEqual(problems, []);
      } catch (err) {
        for (const r of refused) t.diagnostic(`page got ${r}`);
        throw await explainFailure(t, page, err, { h, session: watched, steered });
      } finally {
        for (const p of problems) t.diagnostic(p);
        await context.close();
      }
    });

    it('denies by keyboard, replaces a reviewed result, continues, retries, patches, interrupts and resumes', async (t) => {
      const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('pageerror', (err) => problems.push(`pageerror: ${String(err)}`));
      page.on('console', (m) => {
        if (m.type() === 'error' || m.type() === 'warning')
          problems.push(`${m.type()}: ${m.text()} ${m.location().url}`);
      });
      const refused = refusals(page);
      const steered = steeringCalls(page);
      const lastText = async (id: string) => {
        const h2 = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
        return h2.at(-1);
      };
      const shows = (t: string) =>
        page.waitForFunction(
          (x) => [...document.querySelectorAll('.turn.assistant .text')].some((e) => e.textContent === x),
          t,
          WAIT,
        );
      let watched: string | undefined;
      try {
        await page.goto(`${h.service.url}/console`);
        await page.fill('#api-key', KEY);
        await page.click('button:has-text("Use key")');
        // get_weather waits for approval, calculate_sum runs at once; every result waits for review.
        h.fake.enqueue(
          toolCalls([toolUse('get_weather', { location: 'Oslo' }), toolUse('calculate_sum', { a: 2, b: 3 })]),
        );
        const created = await h.api.post('/v1/sessions', {
          input: 'Weather in Oslo and 2 + 3?',
          tools: ['get_weather', 'calculate_sum'],
          approval: ['get_weather'],
          review_tool_results: true,
        });
        const id = created.body.id;
        watched = id;
        await page.goto(`${h.service.url}/console#/sessions/${id}`);
        await page.waitForSelector(
          '.tool-card[data-tool="get_weather"][data-state="awaiting_approval"]',
          WAIT,
        );

        // Deny with the keyboard only: the reason field, then Tab to Deny, then Enter.
        await page.focus('.tool-card[data-tool="get_weather"] input.deny-reason');
        await page.keyboard.type('not now');
        await page.keyboard.press('Tab');
        assert.equal(await page.evaluate(() => document.activeElement?.textContent?.trim()), 'Deny');
        await page.keyboard.press('Enter');

        // Both results wait for review: replace the sum, then continue. The answer thinks first.
        const sum = await page.waitForSelector(
          '.tool-card[data-tool="calculate_sum"][data-state="under_review"]',
          WAIT,
        );
        await page.waitForSelector(
          '.tool-card[data-tool="get_weather"][data-state="under_review"].is-error',
          WAIT,
        );
        assert.match((await sum.textContent())!, /5/);
        await page.fill('.tool-card[data-tool="calculate_sum"] textarea.result-draft', '5 (checked)');
        await page.click('.tool-card[data-tool="calculate_sum"] button.submit-result');
        await page.waitForFunction(
          () =>
            document
              .querySelector('.tool-card[data-tool="calculate_sum"] .tool-result')
              ?.textContent?.includes('5 (checked)'),
          undefined,
          WAIT,
        );
        h.fake.enqueue(reply([thinking('The user wants two things.'), textBlock('Done.')]));
        await page.click('.required button:has-text("Continue")');
        await shows('Done.');
        await sessionStatus(page, 'idle');
        // Thinking is there, collapsed.
        await page.waitForSelector('details.thinking:not([open])', WAIT);
        const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
        const results = history.flatMap((m: any) =>
          Array.isArray(m.content) ? m.content.filter((b: any) => b.type === 'tool_result') : [],
        );
        const denied = results.find((r: any) => r.is_error);
        assert.match(JSON.stringify(denied.content), /not now/);
        assert.ok(results.some((r: any) => JSON.stringify(r.content).includes('5 (checked)')));

        // Retry the last turn with a bigger max_tokens.
        h.fake.enqueue(text('Retried.'));
        await page.fill('#retry-max-tokens', '2048');
        await page.click('button.retry');
        await shows('Retried.');
        await sessionStatus(page, 'idle');
        assert.equal((await lastText(id)).content.at(-1).text, 'Retried.');
        assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.params.max_tokens, 2048);
        await page.waitForFunction(
          () =>
            ![...document.querySelectorAll('.turn.assistant .text')].some((e) => e.textContent === 'Done.'),
          undefined,
          WAIT,
        );

        // PATCH settings from the editor.
        await page.click('details.settings > summary');
        const settings = JSON.parse(await page.inputValue('#settings-json'));
        assert.equal(settings.params.max_tokens, 2048);
        await page.fill(
          '#settings-json',
          JSON.stringify({ max_iterations: 7, metadata: { owner: 'console-test' } }, null, 2),
        );
        await page.click('details.settings button:has-text("Save settings")');
        await h.api.waitFor(id, (s) => s.max_iterations === 7 && s.metadata.owner === 'console-test');

        // Interrupt a turn in flight with a new message.
        h.fake.enqueue(hang(), text('Interrupted answer.'));
        const sent = h.fake.requests.length;
        await page.fill('#composer-text', 'Write a long essay.');
        await page.click('form.composer button[type="submit"]');
        await sessionStatus(page, 'running');
        // The turn is in flight (the fake holds it) before the interrupt.
        await h.fake.waitForRequests(sent + 1, 30_000);
        await page.fill('#composer-text', 'Stop; just say hi.');
        await page.check('#composer-interrupt');
        await page.click('form.composer button[type="submit"]');
        await shows('Interrupted answer.');
        await sessionStatus(page, 'idle');
        assert.equal((await lastText(id)).content.at(-1).text, 'Interrupted answer.');

        // A failed turn is marked; Resume sends it again.
        h.fake.enqueue(apiError(400, 'invalid_request_error', { message: 'bad request for this test' }));
        await page.fill('#composer-text', 'One more?');
        await page.click('form.composer button[type="submit"]');
        await sessionStatus(page, 'failed');
        assert.match((await page.textContent('.error-turn'))!, /upstream_invalid_request/);
        h.fake.enqueue(text('Recovered.'));
        await page.click('button.resume');
        await shows('Recovered.');
        await sessionStatus(page, 'idle');

        // Delete, confirmed in two steps: back to the list, and the session is gone.
        await page.click('button:has-text("Delete…")');
        await page.click('button:has-text("Delete for good")');
        await page.waitForSelector('#new-input', WAIT);
        assert.equal((await h.api.get(`/v1/sessions/${id}`)).status, 404);
        assert.deepEqual(problems, []);
      } catch (err) {
        for (const r of refused) t.diagnostic(`page got ${r}`);
        throw await explainFailure(t, page, err, { h, session: watched, steered });
      } finally {
        for (const p of problems) t.diagnostic(p);
        await context.close();
      }
    });

    it('opens a session from a client token in the fragment; the README example shows each turn once', async (t) => {
      const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('pageerror', (err) => problems.push(`pageerror: ${String(err)}`));
      const requested: string[] = [];
      page.on('request', (r) => requested.push(r.url()));
      let watched: string | undefined;
      try {
        // The README's example: two get_weather calls run at once (no pause), then the answer; forked, titled.
        h.fake.enqueue(
          toolCalls([
            toolUse('get_weather', { location: 'Paris' }),
            toolUse('get_weather', { location: 'Tokyo' }),
          ]),
          text('Paris is mild and Tokyo is warm.'),
        );
        const created = await h.api.post('/v1/sessions', {
          input: 'What is the weather in Paris and Tokyo?',
          tools: ['get_weather'],
        });
        const parent = created.body.id;
        watched = parent;
        await h.api.waitStatus(parent, 'idle');
        const forked = await h.api.post(`/v1/sessions/${parent}/fork`, { at_iteration: 2 });
        assert.equal(forked.status, 201);
        const id = forked.body.id;
        watched = id;
        const minted = await h.api.post('/v1/client-tokens', { session_id: parent, scopes: ['read'] });
        const token = minted.body.token as string;

        const turns = () =>
          page.$$eval('.turn.assistant', (els) => els.map((e) => e.getAttribute('data-turn')));
        await page.goto(`${h.service.url}/console#session=${parent}&token=${token}`);
        await page.waitForSelector(
          'article.session[data-status="idle"] .turn.assistant[data-turn="2"]',
          WAIT,
        );
        await page.waitForSelector('.tool-card[data-tool="get_weather"][data-state="done"]', WAIT);
        assert.deepEqual(await turns(), ['1', '2'], 'no phantom "Assistant turn 1" after the answer');
        assert.match((await page.textContent('.session-name'))!, /What is the weather in Paris and Tokyo\?/);
        assert.match((await page.textContent('.token-note'))!, /client token/);
        // The token left the address bar; no request carried it in a URL.
        assert.ok(!page.url().includes(token), page.url());
        assert.ok(page.url().endsWith(`#/sessions/${parent}`));
        assert.ok(requested.every((u) => !u.includes(token)));
        // After a reload (the history only, the events replayed): still each turn once.
        await page.reload();
        await page.waitForSelector('.turn.assistant[data-turn="2"]', WAIT);
        await page.waitForSelector('.tool-card[data-tool="get_weather"][data-state="done"]', WAIT);
        assert.deepEqual(await turns(), ['1', '2']);

        // With the key: the fork links to its parent.
        await page.click('button:has-text("Forget token")');
        await page.fill('#api-key', KEY);
        await page.click('button:has-text("Use key")');
        await page.goto(`${h.service.url}/console#/sessions/${id}`);
        const link = await page.waitForSelector(`.forked-from a[href="#/sessions/${parent}"]`, WAIT);
        assert.match((await link.textContent())!, new RegExp(parent));
        assert.deepEqual(problems, []);
      } catch (err) {
        throw await explainFailure(t, page, err, { h, session: watched });
      } finally {
        for (const p of problems) t.diagnostic(p);
        await context.close();
      }
    });

    it("nests a sub-agent's session under its call; its approval is given from the parent's page", async (t) => {
      const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('pageerror', (err) => problems.push(`pageerror: ${String(err)}`));
      page.on('console', (m) => {
        if (m.type() === 'error' || m.type() === 'warning')
          problems.push(`${m.type()}: ${m.text()} ${m.location().url}`);
      });
      let watched: string | undefined;
      try {
        // The writer calls its researcher, a call the writer's approval holds; once approved, the researcher's
        // get_weather waits for approval; then each answers.
        // (One fake upstream, its replies in order: the parent waits while its child works.)
        h.fake.enqueue(
          toolCall('researcher', { prompt: 'What is the weather in Paris?' }),
          toolCall('get_weather', { location: 'Paris' }),
          text('Findings: Paris is sunny.'),
          text('Article: the research says Paris is sunny.'),
        );
        const created = await h.api.post('/v1/sessions', {
          system: 'You are a writer.',
          input: 'Write a line on the weather in Paris.',
          approval: ['researcher'],
          tools: [
            {
              type: 'agent',
              name: 'researcher',
              description: 'Researches one question.',
              session: { system: 'You are a researcher.', tools: ['get_weather'], approval: 'always' },
            },
          ],
        });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        const parent = created.body.id as string;
        watched = parent;
        await page.goto(`${h.service.url}/console`);
        await page.fill('#api-key', KEY);
        await page.click('button:has-text("Use key")');
        await page.goto(`${h.service.url}/console#/sessions/${parent}`);

        // The researcher call waits for its approval: no child yet, and none shown as starting.
        const held = '.tool-card[data-tool="researcher"][data-state="awaiting_approval"]';
        await page.waitForSelector(held, WAIT);
        assert.equal(await page.$$eval(`${held} .child`, (els) => els.length), 0);
        assert.deepEqual((await h.api.get(`/v1/sessions/${parent}/children`)).body.data, []);
        await page.click(`${held} .tool-actions button.approve`);

        // Under the researcher call: its child, waiting for the approval of its own call, which this page gives.
        const nested = '.tool-card[data-tool="researcher"] .child';
        await page.waitForSelector(`${nested}[data-status="requires_action"]`, WAIT);
        const children = (await h.api.get(`/v1/sessions/${parent}/children`)).body.data;
        assert.equal(children.length, 1);
        const child = children[0].id as string;
        watched = child;
        assert.equal(await page.getAttribute(`${nested} a.child-link`, 'href'), `#/sessions/${child}`);
        assert.match((await page.textContent(`${nested} .child-title`))!, /weather in Paris/);
        assert.match((await page.textContent('.required'))!, /1 sub-agent call waits for its session/);
        const approve = `${nested} .child-waiting[data-session="${child}"] .child-call[data-tool="get_weather"] button.approve`;
        await page.waitForSelector(approve, WAIT);
        await page.screenshot({ path: `${SHOTS}/console-subagent.png` });
        await page.click(approve);

        // The child ends (its status follows here), its findings answer the call, and the parent finishes.
        await page.waitForSelector(`${nested}[data-status="idle"]`, WAIT);
        await sessionStatus(page, 'idle');
        await page.waitForFunction(
          () =>
            [...document.querySelectorAll('.turn.assistant .text')].some(
              (e) => e.textContent === 'Article: the research says Paris is sunny.',
            ),
          undefined,
          WAIT,
        );
        await page.waitForSelector('.tool-card[data-tool="researcher"][data-state="done"]', WAIT);
        assert.match(
          (await page.textContent('.tool-card[data-tool="researcher"] .tool-result'))!,
          /Findings: Paris is sunny\./,
        );
        assert.equal(await page.$$eval('.child-waiting', (els) => els.length), 0);
        const childHistory = (await h.api.get(`/v1/sessions/${child}/messages`)).body.data;
        assert.ok(
          childHistory.some(
            (m: any) =>
              Array.isArray(m.content) &&
              m.content.some(
                (b: any) => b.type === 'tool_result' && /Simulated weather/.test(JSON.stringify(b)),
              ),
          ),
          'the approved call ran in the child',
        );

        // The child opens from its link, and links back to its parent.
        await page.click(`${nested} a.child-link`);
        await page.waitForSelector(`article.session[data-session="${child}"][data-status="idle"]`, WAIT);
        await page.waitForSelector(`.parent-link a[href="#/sessions/${parent}"]`, WAIT);
        await page.waitForSelector('.tool-card[data-tool="get_weather"][data-state="done"]', WAIT);
        assert.deepEqual(problems, []);
      } catch (err) {
        throw await explainFailure(t, page, err, { h, session: watched });
      } finally {
        for (const p of problems) t.diagnostic(p);
        await context.close();
      }
    });

    it('pages of a listed origin use REST and the WebSocket; others get neither (CORS, 403)', async () => {
      const s = await h.api.post('/v1/sessions', { input: 'Hello', start: false });
      assert.equal(s.status, 201);
      const id = s.body.id;
      const service = h.service.url;

      // A preflight needs no key.
      const preflight = await fetch(`${service}/v1/sessions`, {
        method: 'OPTIONS',
        headers: {
          origin: listed.url,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization, content-type, if-match',
        },
      });
      assert.equal(preflight.status, 204);
      assert.equal(preflight.headers.get('access-control-allow-origin'), listed.url);
      assert.match(preflight.headers.get('access-control-allow-headers')!, /authorization/);
      const foreignPreflight = await fetch(`${service}/v1/sessions`, {
        method: 'OPTIONS',
        headers: { origin: unlisted.url, 'access-control-request-method': 'POST' },
      });
      assert.equal(foreignPreflight.headers.get('access-control-allow-origin'), null);

      // From Node, the upgrade itself: 403 for an unlisted Origin, before the key is even read.
      const upgrade = (origin: string | undefined) =>
        new Promise<number>((resolve, reject) => {
          const ws = new NodeWebSocket(
            `${service.replace('http', 'ws')}/v1/sessions/${id}/stream`,
            ['bearer', KEY],
            {
              ...(origin ? { origin } : {}),
            },
          );
          ws.on('open', () => {
            ws.close();
            resolve(101);
          });
          ws.on('unexpected-response', (_req, res) => {
            resolve(res.statusCode ?? 0);
            ws.terminate();
          });
          ws.on('error', (err) => {
            if (!/Unexpected server response/.test(String(err))) reject(err);
          });
        });
      assert.equal(await upgrade(unlisted.url), 403);
      assert.equal(await upgrade(listed.url), 101);
      assert.equal(await upgrade(undefined), 101);

      const probe = async (origin: string) => {
        const context = await browser.newContext();
        const page = await context.newPage();
        try {
          await page.goto(origin);
          return await page.evaluate(
            async ({ service, id, key }) => {
              let rest: string;
              try {
                const r = await fetch(`${service}/v1/sessions/${id}`, {
                  headers: { authorization: `Bearer ${key}` },
                });
                rest = `${r.status} ${(await r.json()).id}`;
              } catch (err) {
                rest = `blocked: ${(err as Error).name}`;
              }
              const ws = await new Promise<string>((resolve) => {
                const sock = new WebSocket(`${service.replace('http', 'ws')}/v1/sessions/${id}/stream`, [
                  'bearer',
                  key,
                ]);
                sock.onmessage = (m) => {
                  resolve(`event ${JSON.parse(m.data).type}`);
                  sock.close();
                };
                sock.onclose = (e) => resolve(`closed ${e.code}`);
              });
              return { rest, ws };
            },
            { service, id, key: KEY },
          );
        } finally {
          await context.close();
        }
      };
      assert.deepEqual(await probe(listed.url), { rest: `200 ${id}`, ws: 'event session.created' });
      assert.deepEqual(await probe(unlisted.url), { rest: 'blocked: TypeError', ws: 'closed 1006' });
    });
  },
);
