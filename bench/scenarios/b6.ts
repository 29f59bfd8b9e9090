/**
 * B6 idle footprint: the service's RSS with 10,000 idle sessions (created over REST with `start: false`), then with
 * 5,000 idle WebSocket connections (one per session, each having received its replay), once RSS has settled.
 */
import WebSocket from 'ws';
import type { Ctx } from '../lib/context.js';
import { redisInfo, settledRss } from '../lib/procs.js';
import { listen, openWs, streamUrl, unlisten } from '../lib/ws.js';
import { http, httpOk, pool, withTimeout } from '../lib/util.js';
import { verdict, type Verdict } from './common.js';

export interface B6Result {
  sessions: number;
  connections: number;
  rssFresh: number;
  rssSessions: number;
  rssConnections: number;
  heapUsedConnections: number;
  redisUsedSessions: number;
  createSeconds: number;
  connectSeconds: number;
  openFilesLimit: string;
  verdict: Verdict;
}

async function heapUsed(base: string): Promise<number> {
  const r = await http('GET', `${base}/metrics`);
  return Number(/^nodejs_heap_used_bytes (\d+)/m.exec(String(r.body))?.[1] ?? NaN);
}

export async function createIdle(base: string, n: number): Promise<string[]> {
  return pool(Array.from({ length: n }), 32, async (_, i) => {
    const s = await httpOk('POST', `${base}/v1/sessions`, {
      start: false,
      tools: ['calculate_sum'],
      input: `idle session ${i}`,
    });
    return s.id as string;
  });
}

export async function connectIdle(base: string, ids: string[]): Promise<WebSocket[]> {
  return pool(ids, 100, async (id) => {
    const ws = await openWs(streamUrl(base, id), 30_000);
    // Each connection first gets its replay (session.created, session.status); then it idles.
    await withTimeout(
      new Promise<void>((resolve) => {
        let n = 0;
        listen(ws, () => {
          if (++n >= 2) resolve();
        });
      }),
      30_000,
      'idle connection replay',
    );
    unlisten(ws);
    ws.on('error', () => {});
    return ws;
  });
}

export async function b6(ctx: Ctx, openFilesLimit: string): Promise<B6Result> {
  const nSessions = 10_000;
  const nConns = 5_000;
  await ctx.redis.admin.flushall();
  const svc = await ctx.service();
  const sockets: WebSocket[] = [];
  try {
    if (ctx.follow === 'poll') throw new Error('B6 needs the WebSocket route');
    const rssFresh = await settledRss(svc.pid);
    let t = performance.now();
    const ids = await createIdle(svc.url, nSessions);
    const createSeconds = (performance.now() - t) / 1000;
    const rssSessions = await settledRss(svc.pid, 1000, 10_000);
    const redisUsedSessions = Number((await redisInfo(ctx.redis.admin, 'memory')).used_memory);
    t = performance.now();
    sockets.push(...(await connectIdle(svc.url, ids.slice(0, nConns))));
    const connectSeconds = (performance.now() - t) / 1000;
    const rssConnections = await settledRss(svc.pid, 1000, 10_000);
    const heap = await heapUsed(svc.url);
    const alive = sockets.filter((s) => s.readyState === WebSocket.OPEN).length;
    return {
      sessions: nSessions,
      connections: alive,
      rssFresh,
      rssSessions,
      rssConnections,
      heapUsedConnections: heap,
      redisUsedSessions,
      createSeconds,
      connectSeconds,
      openFilesLimit,
      verdict: verdict(Math.max(rssSessions, rssConnections) <= 200 * 1024 * 1024 && alive === nConns),
    };
  } finally {
    for (const s of sockets) s.terminate();
    await svc.stop();
  }
}

export async function b6Profile(ctx: Ctx, dir: string) {
  await ctx.redis.admin.flushall();
  const svc = await ctx.service({}, dir);
  const sockets: WebSocket[] = [];
  try {
    const ids = await createIdle(svc.url, 10_000);
    sockets.push(...(await connectIdle(svc.url, ids.slice(0, 5000))));
  } finally {
    for (const s of sockets) s.terminate();
    await svc.stop();
  }
}
