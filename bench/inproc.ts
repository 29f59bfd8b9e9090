/**
 * The peer of the service: the SDK's `client.beta.messages.toolRunner` in this process, nothing persisted. A worker
 * of bench/run.ts: it reads one JSON command per stdin line and answers one JSON line on stdout.
 *
 *   {"op":"run","id":1,"count":1000,"tagPrefix":"b2-sdk-","maxIterations":10}
 *   → {"id":1,"ok":true,"walls":[ms…],"t0":…,"t1":…,"iterations":…,"errors":[…]}
 *
 *   {"op":"paced","id":2,"count":500,"tagPrefix":"b9-sdk-","maxIterations":10,"staggerMs":2000,"eventDelayMs":50}
 *   → {"id":2,"ok":true,"lateness":{p50,p99,max,count},"eventLoop":{p99,max},"t0":…,"t1":…,"iterations":…,…}
 *
 * Each runner is the same loop the service drives: streaming, `thread: false`, the project's calculate_sum tool.
 * `paced` (B9) starts the runners spread over `staggerMs` and measures each text delta's lateness from the fake's
 * schedule (pacedLateness) and this process's event-loop delay.
 *
 * The relaying peer (B9's third side): an app that runs the SDK in its own process and streams each run to its
 * browser over a WebSocket, nothing persisted. A client opens `ws://127.0.0.1:<wsPort>/run/<tag>`; the runner for
 * that tag starts and every stream event goes out as one text frame (`{"type":"stream.event","data":<event>}`, one
 * JSON.stringify each, as the service stores it once), then `{"type":"end"}` and a close. The bench's followers
 * measure the lateness, as on the service side;
 *
 *   {"op":"relayed","id":3,"count":500,"tagPrefix":"b9-rel-","maxIterations":10}
 *   → {"id":3,"ok":true,"eventLoop":{p99,max},"t0":…,"t1":…,"iterations":…,…} once `count` runs of that prefix ended
 */
import Anthropic from '@anthropic-ai/sdk';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { WebSocketServer, type WebSocket } from 'ws';
import calculateSum from '../tools/calculate_sum.js';
import { pacedLateness } from './lib/util.js';

const baseURL = process.argv[2];
if (!baseURL) {
  process.stderr.write('usage: inproc.ts <fake url>\n');
  process.exit(2);
}

// Same client options as the service's (src/plugins/anthropic.ts), UPSTREAM_MAX_RETRIES at its default.
const client = new Anthropic({ apiKey: 'bench-key', baseURL, maxRetries: 2 });

interface RunCommand {
  op: 'run' | 'paced' | 'relayed';
  id: number;
  count: number;
  tagPrefix: string;
  maxIterations: number;
  staggerMs?: number;
  eventDelayMs?: number;
}

function summary(values: number[]) {
  values.sort((a, b) => a - b);
  const at = (p: number) => values[Math.min(values.length - 1, Math.floor((p / 100) * values.length))] ?? NaN;
  return { p50: at(50), p99: at(99), max: values.at(-1) ?? NaN, count: values.length };
}

async function pacedRun(tag: string, cmd: RunCommand, late: number[]): Promise<number> {
  const delay = cmd.eventDelayMs ?? 50;
  const runner = client.beta.messages.toolRunner({
    model: 'claude-sonnet-5-5',
    max_tokens: 1024,
    messages: [{ role: 'user', content: [{ type: 'text', text: tag }] }],
    tools: [calculateSum.tool],
    max_iterations: cmd.maxIterations,
    stream: true,
    thread: false,
  } as any);
  let iterations = 0;
  const state = { start: 0 };
  for await (const stream of runner as AsyncIterable<any>) {
    stream.on('streamEvent', (ev: any) => {
      if (ev.type !== 'content_block_delta' || ev.delta?.type !== 'text_delta') return;
      const v = pacedLateness(ev.delta.text, Date.now(), delay, state);
      if (v !== undefined) late.push(v);
    });
    await stream.finalMessage();
    iterations++;
  }
  return iterations;
}

async function paced(cmd: RunCommand) {
  const eld = monitorEventLoopDelay({ resolution: 10 });
  eld.enable();
  const late: number[] = [];
  const t0 = performance.timeOrigin + performance.now();
  const results = await Promise.allSettled(
    Array.from({ length: cmd.count }, async (_, i) => {
      await new Promise((r) => setTimeout(r, ((cmd.staggerMs ?? 0) * i) / cmd.count));
      return pacedRun(`${cmd.tagPrefix}${i}`, cmd, late);
    }),
  );
  const t1 = performance.timeOrigin + performance.now();
  eld.disable();
  const errors = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason).slice(0, 300)] : []));
  return {
    id: cmd.id,
    ok: errors.length === 0,
    lateness: summary(late),
    eventLoop: { p99: eld.percentile(99) / 1e6, max: eld.max / 1e6 },
    iterations: results.reduce((a, r) => a + (r.status === 'fulfilled' ? r.value : 0), 0),
    t0,
    t1,
    walls: [],
    errors: errors.slice(0, 5),
    errorCount: errors.length,
  };
}

interface RunOut {
  wall: number;
  iterations: number;
  /** Per iteration: from the runner yielding the turn to its final message, and from there to the next yield. */
  upstreamMs: number[];
  betweenMs: number[];
}

async function oneRun(tag: string, maxIterations: number): Promise<RunOut> {
  const t0 = performance.now();
  const runner = client.beta.messages.toolRunner({
    model: 'claude-sonnet-5-5',
    max_tokens: 1024,
    messages: [{ role: 'user', content: [{ type: 'text', text: tag }] }],
    tools: [calculateSum.tool],
    max_iterations: maxIterations,
    stream: true,
    thread: false,
  } as any);
  let iterations = 0;
  const upstreamMs: number[] = [];
  const betweenMs: number[] = [];
  let lastFinal: number | null = null;
  for await (const stream of runner as AsyncIterable<any>) {
    const yielded = performance.now();
    if (lastFinal !== null) betweenMs.push(yielded - lastFinal);
    stream.on('streamEvent', () => {});
    await stream.finalMessage();
    lastFinal = performance.now();
    upstreamMs.push(lastFinal - yielded);
    iterations++;
  }
  return { wall: performance.now() - t0, iterations, upstreamMs, betweenMs };
}

async function run(cmd: RunCommand) {
  const t0 = performance.timeOrigin + performance.now();
  const results = await Promise.allSettled(
    Array.from({ length: cmd.count }, (_, i) => oneRun(`${cmd.tagPrefix}${i}`, cmd.maxIterations)),
  );
  const t1 = performance.timeOrigin + performance.now();
  const ok = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const errors = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason).slice(0, 300)] : []));
  return {
    id: cmd.id,
    ok: errors.length === 0,
    walls: ok.map((r) => r.wall),
    // Per-iteration split, for single runs only (B1): concurrent runs would only measure the queueing.
    upstreamMs: cmd.count === 1 ? ok.flatMap((r) => r.upstreamMs) : [],
    betweenMs: cmd.count === 1 ? ok.flatMap((r) => r.betweenMs) : [],
    iterations: ok.reduce((a, r) => a + r.iterations, 0),
    t0,
    t1,
    errors: errors.slice(0, 5),
    errorCount: errors.length,
  };
}

/** Runs ended (or failed) per tag prefix, for `relayed`. */
const relayedRuns = new Map<
  string,
  { iterations: number; errors: string[]; ended: number; wake?: () => void }
>();

function relayTally(prefix: string) {
  let t = relayedRuns.get(prefix);
  if (!t) relayedRuns.set(prefix, (t = { iterations: 0, errors: [], ended: 0 }));
  return t;
}

async function relayRun(tag: string, ws: WebSocket): Promise<number> {
  const runner = client.beta.messages.toolRunner({
    model: 'claude-sonnet-5-5',
    max_tokens: 1024,
    messages: [{ role: 'user', content: [{ type: 'text', text: tag }] }],
    tools: [calculateSum.tool],
    max_iterations: 10,
    stream: true,
    thread: false,
  } as any);
  let iterations = 0;
  for await (const stream of runner as AsyncIterable<any>) {
    stream.on('streamEvent', (ev: unknown) => {
      if (ws.readyState === ws.OPEN) ws.send(`{"type":"stream.event","data":${JSON.stringify(ev)}}`);
    });
    await stream.finalMessage();
    iterations++;
  }
  return iterations;
}

const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
wss.on('connection', (ws, req) => {
  const tag = decodeURIComponent((req.url ?? '').replace(/^\/run\//, ''));
  const tally = relayTally(tag.replace(/\d+$/, ''));
  relayRun(tag, ws)
    .then(
      (n) => {
        tally.iterations += n;
        if (ws.readyState === ws.OPEN) ws.send('{"type":"end"}');
        ws.close();
      },
      (err) => {
        tally.errors.push(String(err).slice(0, 300));
        ws.terminate();
      },
    )
    .finally(() => {
      tally.ended++;
      tally.wake?.();
    });
});

async function relayed(cmd: RunCommand) {
  const eld = monitorEventLoopDelay({ resolution: 10 });
  eld.enable();
  const t0 = performance.timeOrigin + performance.now();
  const tally = relayTally(cmd.tagPrefix);
  while (tally.ended < cmd.count) await new Promise<void>((r) => (tally.wake = r));
  const t1 = performance.timeOrigin + performance.now();
  eld.disable();
  relayedRuns.delete(cmd.tagPrefix);
  return {
    id: cmd.id,
    ok: tally.errors.length === 0,
    eventLoop: { p99: eld.percentile(99) / 1e6, max: eld.max / 1e6 },
    iterations: tally.iterations,
    t0,
    t1,
    walls: [],
    errors: tally.errors.slice(0, 5),
    errorCount: tally.errors.length,
  };
}

const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  if (!line.trim()) return;
  const cmd = JSON.parse(line) as RunCommand;
  (cmd.op === 'paced' ? paced(cmd) : cmd.op === 'relayed' ? relayed(cmd) : run(cmd)).then(
    (res) => process.stdout.write(`${JSON.stringify(res)}\n`),
    (err) => process.stdout.write(`${JSON.stringify({ id: cmd.id, ok: false, errors: [String(err)] })}\n`),
  );
});
rl.on('close', () => process.exit(0));
wss.once('listening', () => {
  const address = wss.address();
  const wsPort = typeof address === 'object' && address ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ ready: true, wsPort })}\n`);
});
