import { AnthropicError } from '@anthropic-ai/sdk';
import fp from 'fastify-plugin';
import { componentLog } from '../log.js';
import type { ModelClient } from '../model-client.js';
import { countingFetch, upstreamContext } from '../observability/upstream-fetch.js';
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
    const reader = res.body.getReader();
    // The run this request is of (its AsyncLocalStorage, entered by the run): its relay may ask reads to wait.
    const ctx = upstreamContext.getStore();
    const body = new ReadableStream<Uint8Array>({
      async pull(ctrl) {
        // Backpressure: the relay is behind writing the stream's events; the idle deadline starts after the wait.
        const gate = ctx?.gate?.();
        if (gate) await gate;
        let timer: NodeJS.Timeout | undefined;
        const idle = new Promise<never>((_, reject) => {
          // Decided after the poll phase: data that arrived while the event loop was busy is read first.
          timer = setTimeout(
            () =>
              setImmediate(() =>
                reject(new AnthropicError(`The upstream stream sent nothing for ${idleMs} ms; aborted.`)),
              ),
            idleMs,
          );
        });
        try {
          const r = await Promise.race([reader.read(), idle]);
          if (r.done) ctrl.close();
          else ctrl.enqueue(r.value);
        } catch (err) {
          reader.cancel(err).catch(() => {});
          ctrl.error(err);
        } finally {
          clearTimeout(timer);
        }
      },
      cancel: (reason) => reader.cancel(reason),
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
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
