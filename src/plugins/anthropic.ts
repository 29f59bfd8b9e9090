import { AnthropicError } from '@anthropic-ai/sdk';
import fp from 'fastify-plugin';
import { componentLog } from '../log.js';
import type { ModelClient } from '../model-client.js';
import { countingFetch, upstreamContext, type UpstreamContext } from '../observability/upstream-fetch.js';
import { createModelClient, type ProviderOptions } from '../providers.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The SDK client of ANTHROPIC_PROVIDER: `Anthropic`, `AnthropicBedrock` or `AnthropicVertex`. */
    anthropic: ModelClient;
    /** `offline` when the built-in fake model answers (no ANTHROPIC_API_KEY), else the provider. */
    modelBackend: 'offline' | 'anthropic' | 'bedrock' | 'vertex';
  }
}

export interface AnthropicPluginOptions {
  provider: ProviderOptions;
  maxRetries: number;
  /** The SDK's `timeout` of each request (UPSTREAM_TIMEOUT_MS). */
  timeoutMs: number;
  /** A streamed answer that sends nothing for this long is aborted (UPSTREAM_IDLE_MS). */
  idleMs: number;
}

/** What the idle bound needs of the run (its relay's gate) and of the configuration. */
interface IdleBound {
  idleMs: number;
  /** The run this request is of (its AsyncLocalStorage, entered by the run): its relay may ask reads to wait. */
  ctx: UpstreamContext | undefined;
}

/**
 * The idle deadline of one body's reads: one timer per body, re-armed (refresh) at each read, not a timer and a race
 * per read — a read is one streamed event at the API's pace, so this is per-delta work. `reading` counts the reads
 * begun, `settled` those answered; the timer acts only on a read still pending since it was armed, and only after
 * one more I/O turn (setImmediate), so data that arrived while the event loop was busy is read first. `onIdle` gets
 * the error once, when it fires.
 */
class IdleTimer {
  reading = 0;
  settled = 0;
  /** The body failed (the deadline passed, or a read threw): nothing more is read from it. */
  failed = false;
  /** The error the reads end with once failed. */
  failure: unknown = null;
  private readonly timer: NodeJS.Timeout;

  constructor(idleMs: number, onIdle: (err: AnthropicError) => void) {
    this.timer = setTimeout(() => {
      // The read begun when the timer was last armed (reads are one at a time: reading - settled is 0 or 1).
      const pending = this.reading;
      if (this.settled === pending) return;
      setImmediate(() => {
        if (this.settled === pending || this.reading !== pending || this.failed) return;
        const err = new AnthropicError(`The upstream stream sent nothing for ${idleMs} ms; aborted.`);
        this.failed = true;
        this.failure = err;
        onIdle(err);
      });
    }, idleMs);
    this.timer.unref();
  }

  /** A read begins: the deadline counts from now. */
  begin(): void {
    this.reading++;
    this.timer.refresh();
  }

  clear(): void {
    clearTimeout(this.timer);
  }
}

/**
 * The SSE body of a successful answer, bounded in place: the SDK reads a body through its async iterator when it has
 * one (`ReadableStreamToAsyncIterable` in @anthropic-ai/sdk internal/shims), so the body gets an iterator of its own
 * (an own property, shadowing ReadableStream.prototype's) that waits on the relay's gate, arms the idle deadline and
 * reads the body's reader directly — no second web stream and no second Response per request, so each chunk is
 * enqueued and read once, not twice. The reader is taken when the SDK starts iterating, not here: a locked body
 * would fail the SDK's middleware check. A stall cancels the body (which ends its pending read as done) and the
 * read then throws the AnthropicError, as the wrapping stream did.
 */
function boundInPlace(body: ReadableStream<Uint8Array>, { idleMs, ctx }: IdleBound): void {
  let reader: ReadableStreamDefaultReader<Uint8Array> | null = null;
  const idle = new IdleTimer(idleMs, (err) => {
    reader?.cancel(err).catch(() => {});
  });
  const iterator: AsyncIterator<Uint8Array, undefined> = {
    async next(): Promise<IteratorResult<Uint8Array, undefined>> {
      reader ??= body.getReader();
      if (idle.failed) throw idle.failure;
      // Backpressure: the relay is behind writing the stream's events; the idle deadline starts after the wait.
      const gate = ctx?.gate?.();
      if (gate) await gate;
      if (idle.failed) throw idle.failure;
      idle.begin();
      let r: ReadableStreamReadResult<Uint8Array>;
      try {
        r = await reader.read();
      } catch (err) {
        idle.settled++;
        idle.clear();
        if (!idle.failed) {
          idle.failed = true;
          idle.failure = err;
        }
        throw idle.failure;
      }
      idle.settled++;
      // Cancelled by the idle deadline: the pending read ended as done; the stall is the error.
      if (idle.failed) throw idle.failure;
      if (r.done) {
        idle.clear();
        reader.releaseLock();
        return { done: true, value: undefined };
      }
      return { done: false, value: r.value };
    },
    async return(): Promise<IteratorResult<Uint8Array, undefined>> {
      idle.clear();
      reader ??= body.getReader();
      const cancelled = reader.cancel();
      reader.releaseLock();
      await cancelled;
      return { done: true, value: undefined };
    },
  };
  Object.defineProperty(body, Symbol.asyncIterator, { value: () => iterator, configurable: true });
}

/**
 * The same bound as a second stream around the body: for Bedrock's binary event stream (its SDK reads and converts
 * the body in its own middleware, not through the iterator) and for the body of a failed answer.
 */
function boundByWrapping(
  res: Response,
  body: ReadableStream<Uint8Array>,
  { idleMs, ctx }: IdleBound,
): Response {
  const reader = body.getReader();
  let ctrl: ReadableStreamDefaultController<Uint8Array> | null = null;
  const idle = new IdleTimer(idleMs, (err) => {
    reader.cancel(err).catch(() => {});
    ctrl?.error(err);
  });
  const wrapped = new ReadableStream<Uint8Array>({
    start(c) {
      ctrl = c;
    },
    async pull(c) {
      // Backpressure: the relay is behind writing the stream's events; the idle deadline starts after the wait.
      const gate = ctx?.gate?.();
      if (gate) await gate;
      if (idle.failed) return;
      idle.begin();
      try {
        const r = await reader.read();
        idle.settled++;
        if (idle.failed) return;
        if (r.done) {
          idle.clear();
          c.close();
        } else c.enqueue(r.value);
      } catch (err) {
        idle.settled++;
        idle.clear();
        if (idle.failed) return;
        idle.failed = true;
        idle.failure = err;
        reader.cancel(err).catch(() => {});
        c.error(err);
      }
    },
    cancel: (reason) => {
      idle.clear();
      return reader.cancel(reason);
    },
  });
  return new Response(wrapped, { status: res.status, statusText: res.statusText, headers: res.headers });
}

/**
 * `fetch` whose event-stream bodies fail when they stay silent for `idleMs` (the API sends `ping` events while a
 * turn thinks): the SDK's stream then rejects with an AnthropicError, which the engine records as a retryable
 * `upstream_error` — where a stalled upstream would otherwise hold the run for as long as the socket lives.
 */
function idleBoundedFetch(idleMs: number, inner: typeof fetch): typeof fetch {
  return async (input, init) => {
    const res = await inner(input, init);
    // SSE, or Bedrock's binary event stream (the SDK turns it into SSE after this fetch).
    const type = res.headers.get('content-type') ?? '';
    if (!res.body || !/\b(text\/event-stream|application\/vnd\.amazon\.eventstream)\b/.test(type)) return res;
    const bound: IdleBound = { idleMs, ctx: upstreamContext.getStore() };
    if (res.ok && type.includes('text/event-stream')) {
      boundInPlace(res.body, bound);
      return res;
    }
    return boundByWrapping(res, res.body, bound);
  };
}

export default fp<AnthropicPluginOptions>(
  async (app, opts) => {
    const client = await createModelClient(opts.provider, {
      maxRetries: opts.maxRetries,
      timeout: opts.timeoutMs,
      // The SDK's own spans (model calls, tool runner, tools) on this instance's provider; none when tracing is off.
      openTelemetry: app.tracing.sdkOption,
      // Each attempt counted and each failure logged (src/observability/upstream-fetch.ts); a silent stream cut.
      fetch: countingFetch(
        app.metrics,
        componentLog(app.log, 'upstream'),
        idleBoundedFetch(opts.idleMs, ('fetch' in opts.provider && opts.provider.fetch) || fetch),
      ),
    });
    app.decorate<ModelClient>('anthropic', client);
    const { provider } = opts;
    app.decorate(
      'modelBackend',
      provider.provider === 'bedrock' || provider.provider === 'vertex'
        ? provider.provider
        : provider.offline
          ? 'offline'
          : 'anthropic',
    );
  },
  { name: 'anthropic', dependencies: ['tracing', 'metrics'] },
);
