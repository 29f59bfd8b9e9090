import { Command, type Cluster, type Redis } from 'ioredis';

/**
 * Fail fast while Redis does not answer. A hung Redis (frozen, paused, partitioned without a reset) leaves the
 * connection open, so ioredis only gives up on each command after its command timeout (3 s), and a route that sends
 * several commands one after another would wait that long for each. Instead a probe PINGs Redis every
 * {@link PROBE_EVERY_MS}; when one has no answer within {@link PROBE_TIMEOUT_MS} (or a command timed out), Redis is
 * *down*: from then on every command of the guarded client is refused at once with {@link NOT_ANSWERING} (a
 * store-unavailable error: routes answer 503 `store_unavailable` with Retry-After, the engine waits it out), without
 * being sent. The pending probe is answered the moment Redis answers again, which ends the down state.
 *
 * Bounds (while Redis is frozen): a request that starts after the probe noticed gets its 503 at once (its commands
 * skip the auto-pipeline, which would hold them behind the hung one); one whose command was already sent or queued in
 * an auto-pipeline gets it when the pipeline in flight times out (≤ the command timeout), and its next command is
 * refused at once. A command refused was never sent, so it cannot run later: unlike a timed-out one, its effect is
 * known to be none.
 */
export const PROBE_TIMEOUT_MS = 1000;
const PROBE_EVERY_MS = 500;
/** While down: how often a new probe is sent once the previous one failed (a refused connection fails at once). */
const PROBE_DOWN_EVERY_MS = 200;

/** The message of the errors of commands refused while Redis is down (src/store/unavailable.ts makes them StoreUnavailable). */
export const NOT_ANSWERING = 'Redis is not answering (health probe); command not sent';

const TIMED_OUT = 'Command timed out';

export interface RedisGuardHooks {
  /** A command of the guarded client failed with ioredis's command timeout. */
  onCommandTimeout(): void;
  /** The probe found Redis down (`true`) or answering again (`false`). */
  onChange(down: boolean): void;
}

export interface RedisGuard {
  /** Whether commands are refused now. */
  readonly down: boolean;
  stop(): void;
}

type Send = (command: Command, ...rest: never[]) => unknown;

/** Wraps `client.sendCommand` (every command, pipelined or not, goes through it) and starts the probe. */
export function guardRedis(client: Redis | Cluster, hooks: RedisGuardHooks): RedisGuard {
  const send: Send = client.sendCommand.bind(client);
  let down = false;
  let stopped = false;
  let probing = false;
  let timer: NodeJS.Timeout | undefined;

  // While down, commands skip the auto-pipeline: ioredis queues a new auto-pipeline behind the one in flight (one
  // at a time per connection), so a command would wait there for the hung pipeline's timeout before reaching the
  // guard below. Sent directly, it is refused at once.
  const autoPipelining = client.options.enableAutoPipelining === true;
  const setDown = (value: boolean) => {
    if (down === value) return;
    down = value;
    if (autoPipelining) client.options.enableAutoPipelining = !value;
    hooks.onChange(value);
  };

  // Only on a connection that is up: while ioredis (re)connects, its own handshake (the ready check's INFO) must go
  // through, and commands fail fast anyway (maxRetriesPerRequest 0).
  const guarded: Send = (command, ...rest) => {
    if (down && client.status === 'ready') {
      command.reject(new Error(NOT_ANSWERING));
      return command.promise;
    }
    // The command's own promise, below the store boundary (src/store/unavailable.ts): ioredis's error as it is.
    command.promise.catch((err: unknown) => {
      if (err instanceof Error && err.message === TIMED_OUT) {
        hooks.onCommandTimeout();
        setDown(true);
      }
    });
    return send(command, ...rest);
  };
  Object.defineProperty(client, 'sendCommand', { value: guarded, writable: true, configurable: true });

  const schedule = () => {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(probe, down ? PROBE_DOWN_EVERY_MS : PROBE_EVERY_MS);
    timer.unref();
  };

  /** One PING at a time: while one is pending (Redis frozen) no other is sent; its answer ends the down state. */
  function probe() {
    if (stopped || probing) return;
    probing = true;
    let settled = false;
    const ping = new Command('ping', []);
    // The timer is checked after one more I/O turn (setImmediate), so an answer that arrived while this process's
    // event loop was blocked is read before the probe is judged lost.
    const lost = setTimeout(
      () =>
        setImmediate(() => {
          if (!settled) setDown(true);
        }),
      PROBE_TIMEOUT_MS,
    );
    lost.unref();
    const finish = (ok: boolean) => {
      settled = true;
      probing = false;
      clearTimeout(lost);
      setDown(!ok);
      schedule();
    };
    ping.promise.then(
      () => finish(true),
      (err: unknown) => {
        if (err instanceof Error && err.message === TIMED_OUT) hooks.onCommandTimeout();
        finish(false);
      },
    );
    send(ping);
  }

  // A new connection answered its handshake: Redis answers. A client that ends stops the probe.
  client.on('ready', () => setDown(false));
  client.on('end', () => {
    stopped = true;
    clearTimeout(timer);
  });
  schedule();

  return {
    get down() {
      return down;
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
