import type { FastifyInstance } from 'fastify';

const counters = new Map<string, number>();

/** Increments a Prometheus counter kept in this process (labels pre-rendered, e.g. `{code="200"}`). */
export function count(name: string, labels = '', by = 1): void {
  const key = `${name}${labels}`;
  counters.set(key, (counters.get(key) ?? 0) + by);
}

/** Prometheus text exposition of this process's counters and gauges. */
export function metrics(app: FastifyInstance): string {
  const mem = process.memoryUsage();
  const lines = [
    '# TYPE trs_active_runs gauge',
    `trs_active_runs ${app.engine.activeRuns}`,
    '# TYPE trs_waiting_runs gauge',
    `trs_waiting_runs ${app.engine.waitingRuns}`,

    '# TYPE process_resident_memory_bytes gauge',
    `process_resident_memory_bytes ${mem.rss}`,
    '# TYPE nodejs_heap_used_bytes gauge',
    `nodejs_heap_used_bytes ${mem.heapUsed}`,
  ];
  const byName = new Map<string, string[]>();
  for (const [key, v] of counters) {
    const name = key.replace(/\{.*$/, '');
    byName.set(name, [...(byName.get(name) ?? []), `${key} ${v}`]);
  }
  for (const [name, rows] of byName) lines.push(`# TYPE ${name} counter`, ...rows);
  return `${lines.join('\n')}\n`;
}
