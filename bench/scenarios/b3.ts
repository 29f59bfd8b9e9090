/**
 * B3 fan-out: one streaming session, 100 WebSocket subscribers. The upstream reply is one long text whose k-th delta
 * is `#k x y `. Two runs per side: paced (the fake writes one event every `paceMs`: latency) and a burst (the whole
 * reply at once: the deliveries per second the relay sustains). The peer is the same workload through
 * `resumable-stream` (bench/peer-resumable.ts, own process, WebSocket frames too).
 *
 * Latency = receipt time at the subscriber − the time delta k crossed the tap in front of the fake (bench/tap.ts,
 * own process, same machine clock). A reader of the fake through the same tap with no relay in between is measured
 * the same way and shown as the method's floor.
 */
import Anthropic from '@anthropic-ai/sdk';
import WebSocket from 'ws';
import type { Ctx, Profiled } from '../lib/context.js';
import { chunkIndex, indexedText } from '../lib/fake.js';
import { spawnNode, RssSampler, type Child } from '../lib/procs.js';
import { listen, openWs, streamUrl, type Envelope } from '../lib/ws.js';
import { httpOk, median, nowMs, percentile, pool, withTimeout } from '../lib/util.js';
import { verdict, type Verdict } from './common.js';

export interface B3Side {
  /** Latency samples pooled over the rounds. */
  paced: { p50: number; p99: number; max: number; deliveries: number; missing: number };
  /** Medians over the rounds (deliveries and missing: totals). */
  burst: { eventsPerSec: number; seconds: number; deliveries: number; missing: number };
  perRound: number[];
  peakRssBytes: number;
}

export interface B3Result {
  subscribers: number;
  deltas: number;
  pacedDeltas: number;
  paceMs: number;
  rounds: number;
  svc: B3Side;
  peer: B3Side;
  floor: { p50: number; p99: number };
  /** Median of the per-round ratios of burst deliveries per second. */
  ratio: number;
  ratios: number[];
  verdict: Verdict;
}

interface Sub {
  ws: WebSocket;
  /** Service: a `session.status` running was seen (the run under test started). */
  running?: boolean;
  /** Peer: the reader is registered with the producer. */
  onReady?: () => void;
  /** Receipt time of each delta index. */
  recv: Float64Array;
  got: number;
  done: Promise<void>;
}

function makeSub(
  ws: WebSocket,
  deltas: number,
  parse: (raw: string, sub: Sub, markDone: () => void) => void,
  onReady?: () => void,
): Sub {
  const sub: Sub = { ws, recv: new Float64Array(deltas).fill(NaN), got: 0, done: Promise.resolve() };
  if (onReady) sub.onReady = onReady;
  sub.done = new Promise<void>((resolve, reject) => {
    listen(ws, (raw) => parse(raw, sub, resolve));
    ws.once('close', () => reject(new Error(`subscriber closed after ${sub.got} deltas`)));
  });
  sub.done.catch(() => {});
  return sub;
}

function note(sub: Sub, text: string, at: number) {
  const k = chunkIndex(text);
  if (k >= 0 && k < sub.recv.length && Number.isNaN(sub.recv[k]!)) {
    sub.recv[k] = at;
    sub.got++;
  }
}

/** Service subscriber: envelopes; deltas are `stream.event`s; done at `session.status` idle after running. */
function serviceParser() {
  return (raw: string, sub: Sub, markDone: () => void) => {
    const at = nowMs();
    const ev = JSON.parse(raw) as Envelope;
    if (ev.type === 'stream.event') {
      const d = ev.data?.event;
      if (d?.type === 'content_block_delta' && d.delta?.type === 'text_delta') note(sub, d.delta.text, at);
    } else if (ev.type === 'session.status' && ev.data?.status === 'idle' && sub.running) {
      markDone();
    } else if (ev.type === 'session.status' && ev.data?.status === 'running') {
      sub.running = true;
    }
  };
}

/** Peer subscriber: lines of raw stream events; done at `message_stop`. */
function peerParser() {
  return (raw: string, sub: Sub, markDone: () => void) => {
    const at = nowMs();
    for (const line of raw.split('\n')) {
      if (!line) continue;
      const ev = JSON.parse(line);
      if (ev.type === 'ready') sub.onReady?.();
      else if (ev.type === 'content_block_delta' && ev.delta?.type === 'text_delta')
        note(sub, ev.delta.text, at);
      else if (ev.type === 'message_stop') markDone();
    }
  };
}

interface RunOut {
  subs: Sub[];
  /** When each delta crossed the tap. */
  sent: Float64Array;
}

function burst(out: RunOut) {
  let last = 0;
  let deliveries = 0;
  let missing = 0;
  for (const s of out.subs) {
    for (const r of s.recv) {
      if (Number.isNaN(r)) missing++;
      else {
        deliveries++;
        last = Math.max(last, r);
      }
    }
  }
  let first = Infinity;
  for (const t of out.sent) if (!Number.isNaN(t)) first = Math.min(first, t);
  const seconds = (last - first) / 1000;
  return { eventsPerSec: deliveries / seconds, seconds, deliveries, missing };
}

/** When each delta of the latest upstream response crossed the tap. */
async function tapMarks(tapUrl: string, deltas: number): Promise<Float64Array> {
  const { marks } = (await httpOk('GET', `${tapUrl}/_tap/marks`)) as { marks: Array<[number, number]> };
  const sent = new Float64Array(deltas).fill(NaN);
  for (const [k, t] of marks) if (k < deltas && Number.isNaN(sent[k]!)) sent[k] = t;
  return sent;
}

async function prepareFake(ctx: Ctx, deltas: number, paceMs: number) {
  await ctx.fakeCtl.reset();
  await ctx.fakeCtl.pacing(paceMs);
  await ctx.fakeCtl.enqueue([{ type: 'message', content: [{ type: 'text', text: indexedText(deltas) }] }]);
}

/** One run through the service: subscribers join a session that has not started, then a message starts it. */
export async function serviceRun(
  ctx: Ctx,
  tapUrl: string,
  base: string,
  subs: number,
  deltas: number,
  paceMs: number,
) {
  await prepareFake(ctx, deltas, paceMs);
  const s = await httpOk('POST', `${base}/v1/sessions`, { start: false, max_tokens: 8192 });
  const list = await pool(Array.from({ length: subs }), 50, async () =>
    makeSub(await openWs(streamUrl(base, s.id), 30_000), deltas, serviceParser()),
  );
  await httpOk('POST', `${base}/v1/sessions/${s.id}/messages`, { text: 'b3 go' });
  await withTimeout(Promise.all(list.map((x) => x.done)), 120_000, 'B3 service subscribers');
  for (const x of list) x.ws.terminate();
  return { subs: list, sent: await tapMarks(tapUrl, deltas) };
}

/** One run through the resumable-stream peer: producer, then readers, then the upstream request. */
async function peerRun(
  ctx: Ctx,
  tapUrl: string,
  peerUrl: string,
  subs: number,
  deltas: number,
  paceMs: number,
  id: string,
) {
  await prepareFake(ctx, deltas, paceMs);
  await httpOk('POST', `${peerUrl}/produce?id=${id}`, {});
  const wsBase = peerUrl.replace(/^http/, 'ws');
  const list = await pool(Array.from({ length: subs }), 50, async () => {
    const ws = await openWs(`${wsBase}/stream?id=${id}`, 30_000);
    let onReady!: () => void;
    const ready = new Promise<void>((resolve) => (onReady = resolve));
    const sub = makeSub(ws, deltas, peerParser(), onReady);
    await withTimeout(ready, 10_000, 'peer reader ready');
    return sub;
  });
  await httpOk('POST', `${peerUrl}/go?id=${id}`, {});
  await withTimeout(Promise.all(list.map((x) => x.done)), 120_000, 'B3 peer subscribers');
  for (const x of list) x.ws.terminate();
  return { subs: list, sent: await tapMarks(tapUrl, deltas) };
}

/** The method's floor: this process reads the fake directly with the SDK (no relay), measured the same way. */
async function directRun(ctx: Ctx, tapUrl: string, deltas: number, paceMs: number) {
  await prepareFake(ctx, deltas, paceMs);
  const client = new Anthropic({ apiKey: 'bench-key', baseURL: tapUrl, maxRetries: 0 });
  const sub: Sub = {
    ws: undefined as unknown as WebSocket,
    recv: new Float64Array(deltas).fill(NaN),
    got: 0,
    done: Promise.resolve(),
  };
  const stream = await client.beta.messages.create({
    model: 'claude-sonnet-5-5',
    max_tokens: 8192,
    messages: [{ role: 'user', content: 'direct' }],
    stream: true,
  });
  for await (const ev of stream) {
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta')
      note(sub, ev.delta.text, nowMs());
  }
  return { subs: [sub], sent: await tapMarks(tapUrl, deltas) };
}

async function startPeer(ctx: Ctx, tapUrl: string): Promise<{ url: string; child: Child }> {
  const child = spawnNode('bench/peer-resumable.ts', [ctx.redis.url, tapUrl]);
  const m = await child.waitFor(
    /\{"url":"(http:\/\/127\.0\.0\.1:\d+)"\}/,
    30_000,
    'the resumable-stream peer',
  );
  return { url: m[1]!, child };
}

export async function startTap(ctx: Ctx): Promise<{ url: string; child: Child }> {
  const child = spawnNode('bench/tap.ts', [ctx.fake.url]);
  const m = await child.waitFor(/\{"url":"(http:\/\/127\.0\.0\.1:\d+)"\}/, 30_000, 'the tap');
  return { url: m[1]!, child };
}

/** Latency of every delivery (receipt at a subscriber − crossing of the tap), pooled over runs. */
function latenciesOf(outs: RunOut[]) {
  const lat: number[] = [];
  let missing = 0;
  for (const o of outs) {
    for (const s of o.subs) {
      for (let k = 0; k < s.recv.length; k++) {
        const r = s.recv[k]!;
        const t = o.sent[k]!;
        if (Number.isNaN(r) || Number.isNaN(t)) missing++;
        else lat.push(r - t);
      }
    }
  }
  return {
    p50: median(lat),
    p99: percentile(lat, 99),
    max: Math.max(...lat),
    deliveries: lat.length,
    missing,
  };
}

export async function b3(ctx: Ctx): Promise<B3Result> {
  const subs = 100;
  const deltas = ctx.quick ? 500 : 2000;
  const pacedDeltas = ctx.quick ? 100 : 300;
  const rounds = ctx.quick ? 1 : 3;
  const paceMs = 20;
  await ctx.redis.admin.flushall();
  const tap = await startTap(ctx);
  const svc = await ctx.service({ ANTHROPIC_BASE_URL: tap.url });
  const peer = await startPeer(ctx, tap.url);
  const svcRss = new RssSampler(svc.pid);
  const peerRss = new RssSampler(peer.child.pid);
  try {
    const floor = latenciesOf([await directRun(ctx, tap.url, pacedDeltas, paceMs)]);
    await serviceRun(ctx, tap.url, svc.url, 10, 50, 1); // warm-up
    await peerRun(ctx, tap.url, peer.url, 10, 50, 1, 'warm');
    const svcPaced: RunOut[] = [];
    const peerPaced: RunOut[] = [];
    const svcBurst: ReturnType<typeof burst>[] = [];
    const peerBurst: ReturnType<typeof burst>[] = [];
    // Rounds alternate the two sides, so both see the same state of a shared machine.
    for (let r = 0; r < rounds; r++) {
      svcPaced.push(await serviceRun(ctx, tap.url, svc.url, subs, pacedDeltas, paceMs));
      peerPaced.push(await peerRun(ctx, tap.url, peer.url, subs, pacedDeltas, paceMs, `paced-${r}`));
      svcBurst.push(burst(await serviceRun(ctx, tap.url, svc.url, subs, deltas, 0)));
      peerBurst.push(burst(await peerRun(ctx, tap.url, peer.url, subs, deltas, 0, `burst-${r}`)));
      ctx.log(
        `  B3 round ${r + 1}/${rounds}: burst ${svcBurst.at(-1)!.eventsPerSec.toFixed(0)} vs ` +
          `${peerBurst.at(-1)!.eventsPerSec.toFixed(0)} deliveries/s`,
      );
    }
    const side = (paced: RunOut[], bursts: ReturnType<typeof burst>[], rss: number): B3Side => ({
      paced: latenciesOf(paced),
      burst: {
        eventsPerSec: median(bursts.map((b) => b.eventsPerSec)),
        seconds: median(bursts.map((b) => b.seconds)),
        deliveries: bursts.reduce((a, b) => a + b.deliveries, 0),
        missing: bursts.reduce((a, b) => a + b.missing, 0),
      },
      perRound: bursts.map((b) => b.eventsPerSec),
      peakRssBytes: rss,
    });
    const svcSide = side(svcPaced, svcBurst, svcRss.stop().peak);
    const peerSide = side(peerPaced, peerBurst, peerRss.stop().peak);
    const ratios = svcBurst.map((b, i) => b.eventsPerSec / peerBurst[i]!.eventsPerSec);
    const ratio = median(ratios);
    return {
      subscribers: subs,
      deltas,
      pacedDeltas,
      paceMs,
      rounds,
      svc: svcSide,
      peer: peerSide,
      floor: { p50: floor.p50, p99: floor.p99 },
      ratio,
      ratios,
      verdict: verdict(
        ratio >= 2 &&
          svcSide.paced.p99 <= peerSide.paced.p99 &&
          svcSide.paced.missing + svcSide.burst.missing === 0,
      ),
    };
  } finally {
    svcRss.stop();
    peerRss.stop();
    await Promise.all([svc.stop(), peer.child.stop()]);
    await tap.child.stop();
  }
}

export async function b3Profile(ctx: Ctx, profiled: Profiled) {
  const tap = await startTap(ctx);
  try {
    await profiled({ ANTHROPIC_BASE_URL: tap.url }, async (svc) => {
      await serviceRun(ctx, tap.url, svc.url, 100, ctx.quick ? 100 : 300, 20);
      await serviceRun(ctx, tap.url, svc.url, 100, ctx.quick ? 500 : 2000, 0);
    });
  } finally {
    await tap.child.stop();
  }
}
