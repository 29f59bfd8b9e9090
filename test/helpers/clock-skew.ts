/**
 * A replica whose clock is off: loaded into a service process with `--import` (spawnService's
 * `nodeArgs: clockSkewArgs()`), it moves the process's Date.now() by CLOCK_SKEW_MS of its environment (ms, either
 * sign), as a machine whose clock drifted would. Redis's clock (TIME) is left as it is.
 */
const skew = Number(process.env['CLOCK_SKEW_MS'] ?? 0);
if (skew) {
  const real = Date.now.bind(Date);
  Date.now = () => real() + skew;
}

/** `nodeArgs` for spawnService that load this module (the skew is CLOCK_SKEW_MS of the service's environment). */
export const clockSkewArgs = () => ['--import', 'tsx', '--import', new URL(import.meta.url).pathname];
