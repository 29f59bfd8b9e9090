/**
 * One event loop serves every tenant: whatever synchronous work is ready when the loop turns runs before any
 * request that arrives meanwhile is even parsed. A tenant with several large requests in flight (bodies of a MiB
 * scanned and parsed, answers written in 64 KiB slices, list pages of 400 kB sessions) had all of their ready steps
 * made in one turn of the loop (issue 22's noisy neighbour: turns of 30–70 ms of CPU made of one tenant's work,
 * which every other tenant's request waited for).
 *
 * Here a tenant makes at most one such step ("heavy": about a millisecond of CPU or more) per turn of the loop.
 * A step asked for when its tenant already made one in this turn waits for a later turn, in the tenant's line
 * (FIFO), while other tenants' steps and every other callback run. The lines are served at the check phase
 * (setImmediate): one step of each waiting tenant per turn, so between two steps of one tenant the loop polls for
 * I/O once, and a request of another tenant waits for at most one heavy step of each tenant, not for all of them.
 *
 * Work-conserving: each tenant's line moves on by one step at every turn the loop makes, and a loop with nothing
 * else to do turns at once (the armed immediate keeps the poll from blocking). One line per tenant per process
 * (module state: one event loop per process, whatever the number of apps in it); in open mode every request is the
 * one tenant `default`, so heavy steps are made one per turn for everyone.
 */

/** Tenants that made a step at once in the current turn (since the last check phase). */
let madeAtOnce = new Set<string>();
/** Tenants whose waiting step was let go at the check phase that started the current turn. */
let letGo = new Set<string>();
/** Steps waiting for a later turn, per tenant, in arrival order. */
const lines = new Map<string, Array<() => void>>();
let armed = false;

function arm(): void {
  if (armed) return;
  armed = true;
  setImmediate(serve);
}

/**
 * The check phase: the turn ends. Each tenant with waiting steps that made none at once in this turn lets its
 * next one go (it runs once this callback returns, in the microtasks of this check phase: it counts in the turn
 * that starts, so its tenant's next step waits for the check phase after the next poll).
 */
function serve(): void {
  armed = false;
  const next = new Set<string>();
  for (const [tenant, line] of lines) {
    if (madeAtOnce.has(tenant)) continue;
    const go = line.shift();
    if (!line.length) lines.delete(tenant);
    next.add(tenant);
    go?.();
  }
  madeAtOnce = new Set();
  letGo = next;
  if (lines.size || letGo.size) arm();
}

/**
 * Before a heavy step of `tenant`'s work: undefined when the step may run now (the tenant made none in this turn
 * and has none waiting), else a promise that resolves in a later turn, when its place in the tenant's line comes.
 * Await it only when it is a promise (`const wait = heavyStep(t); if (wait) await wait;`): no microtask for the
 * common case.
 */
export function heavyStep(tenant: string): Promise<void> | undefined {
  arm();
  if (!lines.has(tenant) && !madeAtOnce.has(tenant) && !letGo.has(tenant)) {
    madeAtOnce.add(tenant);
    return undefined;
  }
  return new Promise<void>((resolve) => {
    const line = lines.get(tenant);
    if (line) line.push(resolve);
    else lines.set(tenant, [resolve]);
  });
}
