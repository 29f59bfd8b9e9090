/**
 * B5 replay: a session whose log holds 100,000 events (written by the bench with pipelined XADDs into
 * `s:{<id>}:e` in the store's format: fields t, d, r, at; EVENT_LOG_MAX raised so nothing is trimmed), and a client
 * that reconnects with the cursor of the last event it saw before them: time until all are received, and the
 * service's RSS growth meanwhile (VmHWM reset before, sampled every 50 ms).
 */
import type { Ctx, Profiled } from '../lib/context.js';
import { RssSampler, settledRss } from '../lib/procs.js';
import { listen, openWs, streamUrl, unlisten, type Envelope } from '../lib/ws.js';
import { httpOk, nowMs, withTimeout } from '../lib/util.js';

/** The session's event log as the service names it: under its default REDIS_KEY_PREFIX (`trs:`), as `npm start` runs. */
const eventLogKey = (id: string) => `trs:s:{${id}}:e`;
import { verdict, type Verdict } from './common.js';

export interface B5Result {
  events: number;
  eventBytes: number;
  writeSeconds: number;
  seconds: number;
  eventsPerSec: number;
  rssBefore: number;
  rssPeak: number;
  growthBytes: number;
  received: number;
  verdict: Verdict;
}

/** A stored `stream.event` like the engine writes for a text delta. */
function eventData(i: number): string {
  return JSON.stringify({
    iteration: 1 + Math.floor(i / 1000),
    event: {
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'text_delta', text: `replayed chunk ${i} of text ` },
    },
  });
}

export async function fillLog(ctx: Ctx, id: string, n: number): Promise<number> {
  const key = eventLogKey(id);
  const rev = '2';
  let bytes = 0;
  for (let start = 0; start < n; start += 5000) {
    const p = ctx.redis.admin.pipeline();
    for (let i = start; i < Math.min(n, start + 5000); i++) {
      const d = eventData(i);
      bytes += d.length;
      p.xadd(key, '*', 't', 'stream.event', 'd', d, 'r', rev, 'at', String(Date.now()));
    }
    await p.exec();
  }
  return bytes / n;
}

/** Reconnects after `after` and reads `n` events; resolves with the time it took (ms) and the count. */
export async function replay(base: string, id: string, after: string, n: number, timeoutMs: number) {
  const t0 = nowMs();
  const ws = await openWs(streamUrl(base, id, after));
  let received = 0;
  try {
    await withTimeout(
      new Promise<void>((resolve, reject) => {
        listen(ws, (raw) => {
          const ev = JSON.parse(raw) as Envelope;
          if (ev.type === 'stream.event' && ++received >= n) resolve();
        });
        ws.once('close', (code) => reject(new Error(`replay closed (${code}) after ${received} events`)));
      }),
      timeoutMs,
      'B5 replay',
    );
  } finally {
    unlisten(ws);
    ws.removeAllListeners('close');
    ws.terminate();
  }
  return { ms: nowMs() - t0, received };
}

export async function b5(ctx: Ctx): Promise<B5Result> {
  const n = ctx.quick ? 50_000 : 100_000;
  await ctx.redis.admin.flushall();
  const svc = await ctx.service({ EVENT_LOG_MAX: String(n * 2) });
  try {
    if (ctx.follow === 'poll') throw new Error('B5 needs the WebSocket route');
    const s = await httpOk('POST', `${svc.url}/v1/sessions`, { start: false });
    const first = await ctx.redis.admin.xrevrange(eventLogKey(s.id), '+', '-', 'COUNT', 1);
    const after = first[0]![0];
    const w0 = nowMs();
    const eventBytes = await fillLog(ctx, s.id, n);
    const writeSeconds = (nowMs() - w0) / 1000;
    // A warm-up replay of a few events, so the route's code is loaded before the RSS baseline.
    await replay(svc.url, s.id, after, 100, 30_000);
    const rssBefore = await settledRss(svc.pid);
    const sampler = new RssSampler(svc.pid);
    let r: { ms: number; received: number };
    let mem: { peak: number };
    try {
      r = await replay(svc.url, s.id, after, n, ctx.quick ? 60_000 : 120_000);
    } finally {
      mem = sampler.stop();
    }
    const growth = mem.peak - rssBefore;
    return {
      events: n,
      eventBytes,
      writeSeconds,
      seconds: r.ms / 1000,
      eventsPerSec: r.received / (r.ms / 1000),
      rssBefore,
      rssPeak: mem.peak,
      growthBytes: growth,
      received: r.received,
      verdict: verdict(growth <= 100 * 1024 * 1024 && r.received === n),
    };
  } finally {
    await svc.stop();
  }
}

export async function b5Profile(ctx: Ctx, profiled: Profiled) {
  await ctx.redis.admin.flushall();
  await profiled({ EVENT_LOG_MAX: '200000' }, async (svc) => {
    const s = await httpOk('POST', `${svc.url}/v1/sessions`, { start: false });
    const first = await ctx.redis.admin.xrevrange(eventLogKey(s.id), '+', '-', 'COUNT', 1);
    await fillLog(ctx, s.id, 100_000);
    await replay(svc.url, s.id, first[0]![0], 100_000, 120_000);
  });
}
