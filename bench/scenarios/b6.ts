/**
 * B6 idle footprint: the service's RSS with 10,000 idle sessions (created over REST with `start: false`), then with
 * 5,000 idle WebSocket connections (one per session, each having received its replay), once RSS has settled after
 * IDLE_MS without requests: the footprint of a replica that is idle, not one still finishing a burst (the service
 * gives memory back once quiet for ~1 s, src/gc-policy.ts `IdleTrim`).
 */
import WebSocket from 'ws';
import type { Ctx, Profiled } from '../lib/context.js';
import { gcAndMemory } from '../lib/inspector.js';
import { spawn } from 'node:child_process';
import { Child, redisInfo, settledRss, spawnNode } from '../lib/procs.js';
import { listen, openWs, streamUrl, unlisten } from '../lib/ws.js';
import { httpOk, pool, sleep, withTimeout } from '../lib/util.js';
import { verdict, type Verdict } from './common.js';

/** How long the service is left without requests before its RSS is read (ms). */
const IDLE_MS = 3000;

/** The service's RSS once it has been idle IDLE_MS, then stable. */
async function idleRss(pid: number): Promise<number> {
  await sleep(IDLE_MS);
  return settledRss(pid, 1000, 10_000);
}

export interface B6Result {
  sessions: number;
  connections: number;
  /** `node` running an idle one-liner: the runtime alone. */
  rssNodeAlone: number;
  /** `node` with the service's modules imported, nothing started (bench/idle.ts). */
  rssModules: number;
  rssFresh: number;
  rssSessions: number;
  rssConnections: number;
  /**
   * After a forced full GC (V8 inspector, activated only once the RSS figures are read): what is retained, not
   * garbage waiting for a collection; with the connections open, then once they are closed.
   */
  afterGc: { connections: NodeJS.MemoryUsage; closed: NodeJS.MemoryUsage };
  redisUsedSessions: number;
  createSeconds: number;
  connectSeconds: number;
  openFilesLimit: string;
  verdict: Verdict;
}

async function nodeAloneRss(): Promise<number> {
  const child = new Child(
    spawn(process.execPath, ['-e', 'console.log(\'{"ready":true}\'); setInterval(() => {}, 60_000);'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  try {
    await child.waitFor(/\{"ready":true\}/, 30_000, 'node -e');
    return await settledRss(child.pid);
  } finally {
    await child.stop();
  }
}

async function modulesRss(): Promise<number> {
  const child = spawnNode('bench/idle.ts', []);
  try {
    await child.waitFor(/\{"ready":true\}/, 30_000, 'bench/idle.ts');
    return await settledRss(child.pid);
  } finally {
    await child.stop();
  }
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
  const nSessions = ctx.quick ? 1_000 : 10_000;
  const nConns = ctx.quick ? 500 : 5_000;
  await ctx.redis.admin.flushall();
  const rssNodeAlone = await nodeAloneRss();
  const rssModules = await modulesRss();
  const svc = await ctx.startService({ env: {}, inspectOnSignal: true });
  const sockets: WebSocket[] = [];
  try {
    if (ctx.follow === 'poll') throw new Error('B6 needs the WebSocket route');
    const rssFresh = await idleRss(svc.pid);
    let t = performance.now();
    const ids = await createIdle(svc.url, nSessions);
    const createSeconds = (performance.now() - t) / 1000;
    const rssSessions = await idleRss(svc.pid);
    const redisUsedSessions = Number((await redisInfo(ctx.redis.admin, 'memory'))['used_memory']);
    t = performance.now();
    sockets.push(...(await connectIdle(svc.url, ids.slice(0, nConns))));
    const connectSeconds = (performance.now() - t) / 1000;
    const rssConnections = await idleRss(svc.pid);
    const alive = sockets.filter((s) => s.readyState === WebSocket.OPEN).length;
    const inspector = await svc.activateInspector();
    const gcConnections = await gcAndMemory(inspector);
    for (const s of sockets.splice(0)) s.terminate();
    await sleep(1000);
    const gcClosed = await gcAndMemory(inspector);
    return {
      sessions: nSessions,
      connections: alive,
      rssNodeAlone,
      rssModules,
      rssFresh,
      rssSessions,
      rssConnections,
      afterGc: { connections: gcConnections, closed: gcClosed },
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

export async function b6Profile(ctx: Ctx, profiled: Profiled) {
  await ctx.redis.admin.flushall();
  await profiled({}, async (svc) => {
    const sockets: WebSocket[] = [];
    try {
      const ids = await createIdle(svc.url, ctx.quick ? 1_000 : 10_000);
      sockets.push(...(await connectIdle(svc.url, ids.slice(0, ctx.quick ? 500 : 5_000))));
    } finally {
      for (const s of sockets) s.terminate();
    }
  });
}
