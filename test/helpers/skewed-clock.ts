/**
 * A replica whose clock is off, in this process: runs `fn` with Date.now() moved by `skew` ms (either sign), restored
 * after, so the service or store code `fn` drives takes its times from that clock while Redis's (TIME) is left as it
 * is. For a service in a process of its own, see clock-skew.ts.
 */
export async function skewed<T>(skew: number, fn: () => Promise<T>): Promise<T> {
  const real = Date.now;
  Date.now = () => real() + skew;
  try {
    return await fn();
  } finally {
    Date.now = real;
  }
}
