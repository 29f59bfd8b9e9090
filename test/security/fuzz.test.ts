import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { PerformanceObserver } from 'node:perf_hooks';
import fc from 'fast-check';
import { startHarness, type Harness } from '../helpers/service.js';
import { connectWs, type WsClient } from '../fixtures/event-clients.js';
import { frameArb, requestArb, routes, UNFUZZED, type Ids } from './fuzz-lib.js';
import { text } from '../fake/script.js';

/**
 * Property-based fuzzing of the whole API surface (issue 11): FUZZ_RUNS REST requests (default 1000, `npm run fuzz`
 * 20,000) and a fifth as many WebSocket frames, as a third tenant, against two other tenants' canary sessions.
 * Asserts: no 5xx and no `internal_error`/1011 over WebSocket; every status answered declared by the served document
 * (/docs/json) for the route that answered it (the harness records each answer by route pattern); the service
 * healthy afterwards; RSS growth bounded; the canaries byte-for-byte unchanged. Prints one `fuzz summary` JSON line (and writes it to FUZZ_REPORT if set).
 */
const RUNS = Number(process.env['FUZZ_RUNS'] ?? 1000);
const WS_RUNS = Math.ceil(RUNS / 5);
const SEED = process.env['FUZZ_SEED'] ? Number(process.env['FUZZ_SEED']) : undefined;
const KEYS = 'acme:key-acme,globex:key-globex,mallory:key-mallory';
const RSS_BOUND_MB = 512;
/**
 * A request slower than this is a failure to look at (issue 22). `npm run fuzz` (FUZZ_RUNS set) holds the issue's
 * 100 ms; the short run of `npm test` shares a 2-core machine with the rest of the suite and holds 2 s.
 *
 * "Slower" is measured twice. The CPU time the process spent during the request (`process.cpuUsage()`: the service
 * runs in this process, so its handler, serializer and hooks plus the client's fetch) is held whatever else the
 * machine runs. The wall time is held too, but only while the machine is not oversubscribed (1-minute load average
 * below its core count): on the shared 2-core machine at a load of 15–30 every request waits for a core, and a wall
 * time over 100 ms there says nothing of the request.
 *
 * Neither figure is the request's alone: the process's CPU counts every thread (V8's concurrent marking and
 * sweeping, libuv's pool) and whatever else the loop ran meanwhile (the service's sweeps and timers, a major GC's
 * pause). So a case over the bound once is run again RERUNS times, and fails only when the median of those runs is
 * over it too: a request whose work is slow is slow every time; one that met a GC is not (the summary lists each
 * case over the bound once, with the GC pauses during it and its median).
 */
const MAX_MS = Number(process.env['FUZZ_MAX_MS'] ?? (process.env['FUZZ_RUNS'] ? 100 : 2000));
const machineIdle = () => os.loadavg()[0]! < os.availableParallelism();
const RERUNS = 5;

/** GC pauses of this process (the service's and the client's: one heap), for the cases over the bound. */
const gcPauses: Array<{ start: number; ms: number; kind: number }> = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries())
    if (e.duration >= 1 && gcPauses.length < 100_000)
      gcPauses.push({
        start: e.startTime,
        ms: e.duration,
        kind: (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? -1,
      });
}).observe({ entryTypes: ['gc'] });
const gcDuring = (from: number, to: number) =>
  gcPauses.filter((g) => g.start + g.ms >= from && g.start <= to).reduce((n, g) => n + g.ms, 0);

/** One request: its status, wall time and the process's CPU time during it (ms). */
async function timed(
  url: string,
  r: { method: string; headers: Record<string, string>; body?: string | undefined },
) {
  const started = performance.now();
  const cpu0 = process.cpuUsage();
  const res = await fetch(url, {
    method: r.method,
    headers: r.headers,
    redirect: 'manual',
    ...(r.body !== undefined && r.method !== 'GET' ? { body: r.body } : {}),
  });
  await res.arrayBuffer();
  const used = process.cpuUsage(cpu0);
  return {
    status: res.status,
    started,
    ms: performance.now() - started,
    cpuMs: (used.user + used.system) / 1000,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('fuzzer routes', () => {
  it('cover every /v1 operation of openapi.json, but the few it says it leaves out', () => {
    const doc = JSON.parse(readFileSync(new URL('../../openapi.json', import.meta.url), 'utf8')) as {
      paths: Record<string, Record<string, unknown>>;
    };
    const documented = Object.entries(doc.paths)
      .filter(([p]) => p.startsWith('/v1/'))
      .flatMap(([p, item]) =>
        Object.keys(item)
          .filter((m) => ['get', 'post', 'put', 'patch', 'delete'].includes(m))
          .map((m) => `${m.toUpperCase()} ${p.replace(/\{([a-z_]+)\}/g, ':$1')}`),
      );
    const fuzzed = new Set([...routes.map(([m, p]) => `${m} ${p}`), ...UNFUZZED]);
    assert.deepEqual(
      documented.filter((op) => !fuzzed.has(op)),
      [],
    );
  });
});

describe('fuzzer', () => {
  let h: Harness;
  const canaries: Array<{ token: string; id: string; snapshot: string }> = [];
  let own = '';
  let served: Parameters<Harness['answers']['undeclared']>[0];

  const snapshot = async (token: string, id: string) => {
    const api = h.api.as(token);
    const parts = await Promise.all(
      [`/v1/sessions/${id}`, `/v1/sessions/${id}/messages`, `/v1/sessions/${id}/events?limit=1000`].map(
        async (p) => {
          const r = await fetch(api.base + p, { headers: { authorization: `Bearer ${token}` } });
          return `${r.status} ${await r.text()}`;
        },
      ),
    );
    return parts.join('\n');
  };

  before(async () => {
    h = await startHarness({
      env: {
        API_KEYS: KEYS,
        RATE_LIMIT_PER_MIN: '0',
        TENANT_MAX_SESSIONS: '0',
        TENANT_MAX_ACTIVE_RUNS: '0',
        LOG_LEVEL: 'silent',
        // Webhook bodies name loopback URLs only (see fuzz-lib.ts): nothing leaves the machine.
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_SECRET_KEY: Buffer.alloc(32, 7).toString('base64'),
      },
    });
    h.fake.setHandler(() => text('ok'));
    for (const token of ['key-acme', 'key-globex']) {
      const api = h.api.as(token);
      const c = await api.post('/v1/sessions', { input: `canary of ${token}`, metadata: { canary: true } });
      assert.equal(c.status, 201);
      await api.waitStatus(c.body.id, 'idle', 30_000);
      canaries.push({ token, id: c.body.id, snapshot: await snapshot(token, c.body.id) });
    }
    const o = await h.api.as('key-mallory').post('/v1/sessions', { start: false });
    own = o.body.id;
    // The one-off costs of a process, paid here rather than by a timed case: the OpenAPI document's first build
    // (~0.4 s of CPU here, then its bytes are served: src/openapi/served.ts) and the MCP SDK's first load (~0.4 s,
    // loaded on first need: src/mcp/hub.ts), which mallory's first `GET /v1/tools` with an MCP server triggers.
    const mallory = h.api.as('key-mallory');
    for (const p of ['/docs/json', '/docs/yaml']) assert.equal((await h.api.get(p)).status, 200);
    served = (await h.api.get('/docs/json')).body;
    const mcp = await mallory.req('PUT', '/v1/mcp-servers/warm', { url: 'http://127.0.0.1:9/mcp' });
    assert.equal(mcp.status, 201, JSON.stringify(mcp.body));
    assert.equal((await mallory.get('/v1/tools')).status, 200);
    assert.ok([200, 204].includes((await mallory.req('DELETE', '/v1/mcp-servers/warm')).status));
  });
  after(async () => h?.close());

  it(`${RUNS} requests and ${WS_RUNS} WebSocket frames: no 5xx, healthy, bounded, canaries unchanged`, async () => {
    const ids: Ids = { own, canaries: canaries.map((c) => c.id) };
    const statuses: Record<string, number> = {};
    const failures: string[] = [];
    const rss0 = process.memoryUsage().rss;
    let slowest = 0;
    let costliest = 0;
    let wallHeld = 0;
    const overOnce: string[] = [];
    const perRoute = new Map<string, { n: number; wall: number; cpu: number; cpuSum: number }>();
    let rssMax = rss0;
    const t0 = Date.now();

    await fc.assert(
      fc.asyncProperty(requestArb(ids, 'key-mallory'), async (r) => {
        let status: string;
        try {
          const { status: code, started, ms, cpuMs } = await timed(h.service.url + r.path, r);
          status = String(code);
          slowest = Math.max(slowest, ms);
          costliest = Math.max(costliest, cpuMs);
          const stat = perRoute.get(r.route) ?? { n: 0, wall: 0, cpu: 0, cpuSum: 0 };
          perRoute.set(r.route, {
            n: stat.n + 1,
            wall: Math.max(stat.wall, ms),
            cpu: Math.max(stat.cpu, cpuMs),
            cpuSum: stat.cpuSum + cpuMs,
          });
          // A route's first case pays its code's first run (JIT, a static file's first read): not held.
          const first = stat.n === 0;
          const idle = machineIdle();
          if (idle && !first) wallHeld++;
          const overCpu = cpuMs > MAX_MS && !first;
          const overWall = idle && ms > MAX_MS && !first;
          if (overCpu || overWall) {
            // Over once: run again; slow only if its median is over too (see MAX_MS).
            const gcMs = gcDuring(started, started + ms);
            const again: Array<{ ms: number; cpuMs: number }> = [];
            for (let i = 0; i < RERUNS; i++) again.push(await timed(h.service.url + r.path, r));
            const cpuMedian = median(again.map((x) => x.cpuMs));
            const wallMedian = median(again.map((x) => x.ms));
            const what = `${r.method} ${r.path.slice(0, 120)}`;
            overOnce.push(
              `${what}: cpu ${cpuMs.toFixed(0)} wall ${ms.toFixed(0)} ms (GC pauses ${gcMs.toFixed(0)} ms); ` +
                `median of ${RERUNS} more: cpu ${cpuMedian.toFixed(1)} wall ${wallMedian.toFixed(1)} ms`,
            );
            if (overCpu && cpuMedian > MAX_MS)
              failures.push(`${what} cost ${cpuMedian.toFixed(0)} ms of CPU (median of ${RERUNS})`);
            if (overWall && machineIdle() && wallMedian > MAX_MS)
              failures.push(`${what} took ${wallMedian.toFixed(0)} ms (median of ${RERUNS})`);
          }
          if (code >= 500)
            failures.push(`${r.method} ${r.path.slice(0, 200)} → ${code} (body ${r.body?.slice(0, 200)})`);
        } catch (err) {
          status = `error:${(err as Error).cause ? String((err as Error & { cause: Error }).cause.message).slice(0, 40) : (err as Error).message.slice(0, 40)}`;
        }
        statuses[status] = (statuses[status] ?? 0) + 1;
        rssMax = Math.max(rssMax, process.memoryUsage().rss);
      }),
      { numRuns: RUNS, ...(SEED !== undefined ? { seed: SEED } : {}) },
    );

    // WebSocket frames on mallory's own session; a socket the server closes is reopened (its close code counted).
    const frameAnswers: Record<string, number> = {};
    let ws: WsClient | undefined;
    // A fresh session of mallory's (the REST phase may have deleted the first one); a frame may delete it too
    // (no frame does today), so it is recreated when the socket cannot open.
    const fresh = async () =>
      (await h.api.as('key-mallory').post('/v1/sessions', { start: false })).body.id as string;
    let wsSession = await fresh();
    await fc.assert(
      fc.asyncProperty(frameArb, async (frame) => {
        ws ??= await connectWs(h.service.url, wsSession, { token: 'key-mallory' }).catch(async () => {
          wsSession = await fresh();
          return connectWs(h.service.url, wsSession, { token: 'key-mallory' });
        });
        const socket = ws;
        const before = socket.frames.items.length;
        socket.send(frame);
        const answer = await Promise.race([
          socket.frames.wait((_f, all) => all.length > before, 'an answer frame', 30_000),
          socket.closed.then((c) => ({ closed: c.code })),
        ]);
        let key: string;
        if ('closed' in answer) {
          key = `close:${answer.closed}`;
          if (answer.closed === 1011) failures.push(`frame ${frame.slice(0, 200)} → close 1011`);
          ws = undefined;
        } else {
          key = answer.type === 'error' ? `error:${answer.error.code}` : answer.type;
          if (['internal_error', 'store_unavailable'].includes(answer.error?.code))
            failures.push(`frame ${frame.slice(0, 200)} → ${answer.error.code}`);
        }
        frameAnswers[key] = (frameAnswers[key] ?? 0) + 1;
        rssMax = Math.max(rssMax, process.memoryUsage().rss);
      }),
      { numRuns: WS_RUNS, ...(SEED !== undefined ? { seed: SEED } : {}) },
    );
    ws?.close();

    // Every (method, route, status) of the run, the set-up's and the frames' upgrades included.
    const undeclared = h.answers.undeclared(served);
    failures.push(...undeclared.map((a) => `undeclared: ${a}`));
    const health = await h.api.get('/healthz');
    const ready = await h.api.get('/readyz');
    const after = await Promise.all(canaries.map((c) => snapshot(c.token, c.id)));
    const summary = {
      rest_cases: RUNS,
      ws_frames: WS_RUNS,
      statuses,
      five_xx: Object.entries(statuses)
        .filter(([s]) => s.startsWith('5'))
        .reduce((n, [, k]) => n + k, 0),
      frame_answers: frameAnswers,
      failures: failures.length,
      // Distinct (method, route, status) answered, and those the served document does not declare.
      answers: h.answers.answers().length,
      undeclared,
      slowest_ms: Math.round(slowest),
      costliest_cpu_ms: Math.round(costliest),
      // Cases whose wall time was held (the machine not oversubscribed at the time).
      wall_time_held: wallHeld,
      // Cases over the bound once, each with the GC pauses during it and the median of its runs again.
      over_once: overOnce.slice(0, 30),
      over_once_count: overOnce.length,
      load_average: os.loadavg().map((l) => Math.round(l * 10) / 10),
      // The ten routes of the highest CPU time of one case: max CPU, mean CPU, max wall time, cases.
      costliest_routes: Object.fromEntries(
        [...perRoute]
          .sort((a, b) => b[1].cpu - a[1].cpu)
          .slice(0, 10)
          .map(([route, st]) => [
            route,
            `cpu max ${st.cpu.toFixed(1)} mean ${(st.cpuSum / st.n).toFixed(1)} wall max ${st.wall.toFixed(0)} ms (${st.n})`,
          ]),
      ),
      rss_start_mb: Math.round(rss0 / 2 ** 20),
      rss_max_mb: Math.round(rssMax / 2 ** 20),
      seconds: Math.round((Date.now() - t0) / 1000),
      canaries_unchanged: after.every((s, i) => s === canaries[i]!.snapshot),
    };
    console.log(`fuzz summary ${JSON.stringify(summary)}`);
    if (process.env['FUZZ_REPORT'])
      writeFileSync(process.env['FUZZ_REPORT'], JSON.stringify(summary, null, 2) + '\n');

    assert.deepEqual(failures.slice(0, 20), []);
    assert.equal(health.status, 200);
    assert.equal(ready.status, 200);
    assert.ok(
      rssMax - rss0 < RSS_BOUND_MB * 2 ** 20,
      `RSS grew by ${Math.round((rssMax - rss0) / 2 ** 20)} MB`,
    );
    for (const [i, c] of canaries.entries())
      assert.equal(after[i], c.snapshot, `canary of ${c.token} changed`);
  });
});
