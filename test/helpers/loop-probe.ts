/**
 * A probe of a service process's event loop, for the tests that measure how one tenant's requests hold up another's
 * (test/security/security-noisy-neighbour.test.ts). Loaded into the service with `--import` (spawnService's
 * `nodeArgs: loopProbeArgs()`); it writes JSON lines to LOOP_PROBE_FILE. Every `cpu` figure is the main thread's own
 * CPU time (from /proc/thread-self/schedstat: neither the machine's other processes nor V8's or libuv's helper
 * threads count; precise to a scheduler tick, ~4 ms). Unlike wall time it does not grow when the machine is busy:
 * it is what the service's event loop did, whatever the share of a core the machine gave it.
 *
 * - `{k: 'block', t, cpu, wall, done}` for every stretch between two turns of a 1 ms timer in which the main thread
 *   ran at least LOOP_PROBE_BLOCK_MS (default 4) of CPU, or took 4× that of wall time; `done` are the requests
 *   whose answers finished in it (what the loop was busy with). A request that arrives during a block waits for
 *   all of it.
 * - `{k: 'req', t, cpu, wall, url, probe}` for every request with an `x-probe` header (its value): the CPU the main thread ran from its
 *   headers' parse to its answer's end (its own work and everything the loop did meanwhile: the time it would
 *   have taken on a core of its own), and its wall time.
 * - `{k: 'gc', t, kind, ms}` for every GC pause of at least 2 ms (`PerformanceObserver`).
 *
 * `t` is `Date.now()` at the end, so a test keeps the records of a time window.
 */
import { openSync, readFileSync, readSync, watch, writeSync } from 'node:fs';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import { subscribe } from 'node:diagnostics_channel';
import type { IncomingMessage } from 'node:http';

const file = process.env['LOOP_PROBE_FILE'];
const BLOCK_MS = Number(process.env['LOOP_PROBE_BLOCK_MS'] ?? 4);

/** The records a probe wrote (those of `[from, to]` by `Date.now()`), by kind. */
export interface ProbeRecords {
  blocks: Array<{ t: number; cpu: number; wall: number; done: string[] }>;
  reqs: Array<{ t: number; cpu: number; wall: number; url: string; probe: string }>;
  gcs: Array<{ t: number; kind: string; ms: number }>;
}

if (file) {
  const fd = openSync('/proc/thread-self/schedstat', 'r');
  const buf = Buffer.alloc(128);
  /** CPU time of this (the main) thread in ms. */
  const cpuNow = () => {
    const n = readSync(fd, buf, 0, buf.length, 0);
    return Number(buf.toString('latin1', 0, n).split(' ')[0]) / 1e6;
  };
  // One descriptor for the process's life: a record is one write(2) (an appendFileSync opened and closed the file
  // for each, ~100 a second under attack, all on the loop it measures).
  const out = openSync(file, 'a');
  const write = (rec: object) => writeSync(out, JSON.stringify(rec) + '\n');
  const started = new WeakMap<IncomingMessage, { cpu: number; wall: number; probe: string }>();
  let done: string[] = [];
  subscribe('http.server.request.start', (message) => {
    const req = (message as { request: IncomingMessage }).request;
    const probe = req.headers['x-probe'];
    if (typeof probe === 'string') started.set(req, { cpu: cpuNow(), wall: performance.now(), probe });
  });
  subscribe('http.server.response.finish', (message) => {
    const req = (message as { request: IncomingMessage }).request;
    const url = `${req.method} ${(req.url ?? '').replace(/ses_[A-Za-z0-9]+/g, ':id').slice(0, 60)}`;
    if (done.length < 50) done.push(url);
    const s = started.get(req);
    if (s)
      write({
        k: 'req',
        t: Date.now(),
        cpu: +(cpuNow() - s.cpu).toFixed(2),
        wall: +(performance.now() - s.wall).toFixed(2),
        url,
        probe: s.probe,
      });
  });
  let cpu0 = cpuNow();
  let wall0 = performance.now();
  setInterval(() => {
    const cpu = cpuNow() - cpu0;
    const wall = performance.now() - wall0;
    if (cpu >= BLOCK_MS || wall >= 4 * BLOCK_MS)
      write({ k: 'block', t: Date.now(), cpu: +cpu.toFixed(1), wall: +wall.toFixed(1), done });
    done = [];
    cpu0 = cpuNow();
    wall0 = performance.now();
  }, 1).unref();
  const kinds: Record<number, string> = {
    [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
    [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
    [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
    [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
  };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if (e.duration < 2) continue;
      const kind = (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? -1;
      write({ k: 'gc', t: Date.now(), kind: kinds[kind] ?? String(kind), ms: +e.duration.toFixed(1) });
    }
  }).observe({ entryTypes: ['gc'] });
}

/** `nodeArgs` for spawnService that load this probe (it writes to LOOP_PROBE_FILE of the service's environment). */
export const loopProbeArgs = () => ['--import', 'tsx', '--import', new URL(import.meta.url).pathname];

/**
 * Resolves once the probe file `path` holds `n` records of requests whose `x-probe` header was `probe` (a request's
 * record is written when its answer's end is handed to the socket, which may be after its client read it).
 */
export async function probedRequests(
  path: string,
  probe: string,
  n: number,
  timeoutMs = 10_000,
): Promise<void> {
  const count = () => readProbe(path, 0, Infinity).reqs.filter((r) => r.probe === probe).length;
  if (count() >= n) return;
  const watcher = watch(path);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${count()} of ${n} records of ${probe} requests in ${path}`)),
        timeoutMs,
      );
      watcher.on('change', () => {
        if (count() < n) return;
        clearTimeout(timer);
        resolve();
      });
      if (count() >= n) {
        clearTimeout(timer);
        resolve();
      }
    });
  } finally {
    watcher.close();
  }
}

/** The records of the probe file `path` whose `t` is in `[from, to]`. */
export function readProbe(path: string, from: number, to: number): ProbeRecords {
  const out: ProbeRecords = { blocks: [], reqs: [], gcs: [] };
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (!line) continue;
    const r = JSON.parse(line) as { k: string; t: number } & Record<string, unknown>;
    if (r.t < from || r.t > to) continue;
    if (r.k === 'block') out.blocks.push(r as unknown as ProbeRecords['blocks'][number]);
    else if (r.k === 'req') out.reqs.push(r as unknown as ProbeRecords['reqs'][number]);
    else if (r.k === 'gc') out.gcs.push(r as unknown as ProbeRecords['gcs'][number]);
  }
  return out;
}
