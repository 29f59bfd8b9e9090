/** A minimal client of the V8 inspector protocol (loopback WebSocket): force a full GC and read memory. */
import WebSocket from 'ws';
import { withTimeout } from './util.js';

async function session<T>(
  url: string,
  fn: (call: (method: string, params?: object) => Promise<any>) => Promise<T>,
) {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  await withTimeout(
    new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    }),
    10_000,
    'inspector connection',
  );
  let seq = 0;
  const waiting = new Map<number, (msg: any) => void>();
  ws.on('message', (raw) => {
    const msg = JSON.parse(raw.toString());
    if (msg.id !== undefined) waiting.get(msg.id)?.(msg);
  });
  const call = (method: string, params: object = {}) => {
    const id = ++seq;
    ws.send(JSON.stringify({ id, method, params }));
    return withTimeout(
      new Promise<any>((resolve, reject) =>
        waiting.set(id, (msg) =>
          msg.error ? reject(new Error(JSON.stringify(msg.error))) : resolve(msg.result),
        ),
      ),
      60_000,
      `inspector ${method}`,
    );
  };
  try {
    return await fn(call);
  } finally {
    ws.close();
  }
}

/** Forces a full GC in the inspected process and returns `process.memoryUsage()` after it. */
export function gcAndMemory(url: string): Promise<NodeJS.MemoryUsage> {
  return session(url, async (call) => {
    await call('HeapProfiler.collectGarbage');
    await call('HeapProfiler.collectGarbage');
    const r = await call('Runtime.evaluate', {
      expression: 'JSON.stringify(process.memoryUsage())',
      returnByValue: true,
    });
    return JSON.parse(r.result.value) as NodeJS.MemoryUsage;
  });
}

/**
 * Runs `work` under the V8 CPU profiler of the inspected process (the profiler `node --cpu-prof` uses, 1 ms
 * sampling, started and stopped over the inspector so the profile covers the workload only, not the start-up and its
 * TypeScript loading) and returns the profile (`.cpuprofile` JSON).
 */
export function cpuProfile(url: string, work: () => Promise<void>): Promise<object> {
  return session(url, async (call) => {
    await call('Profiler.enable');
    await call('Profiler.setSamplingInterval', { interval: 1000 });
    await call('Profiler.start');
    let failure: unknown = null;
    await work().catch((err: unknown) => (failure = err));
    const { profile } = await call('Profiler.stop');
    if (failure) throw failure;
    return profile as object;
  });
}
