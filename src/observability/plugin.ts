import type { TracerProvider } from '@opentelemetry/api';
import fp from 'fastify-plugin';
import { Metrics } from './metrics.js';
import { Tracing, tracesExporters } from './tracing.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** This instance's Prometheus registry and metrics (`GET /metrics`). */
    metrics: Metrics;
    /** This instance's tracing (off unless OTEL_TRACES_EXPORTER names an exporter). */
    tracing: Tracing;
  }
}

/** An error body as the errors plugin writes it starts with its stable code. */
const ERROR_CODE = /^\{"error":\{"code":"([a-z_]{1,40})"/;

/**
 * The metrics registry of this instance, with Node's default metrics, and the count of every 4xx/5xx answer by route
 * pattern (never the URL), method, status and the body's error code (a closed set: the service's own codes).
 */
export const metricsPlugin = fp<{ defaultMetrics?: boolean; tenantLabel?: boolean }>(
  async (app, opts) => {
    const metrics = new Metrics({
      defaultMetrics: opts.defaultMetrics ?? true,
      tenantLabel: opts.tenantLabel ?? false,
    });
    app.decorate('metrics', metrics);
    // A callback hook, not an async one: no promise per answer on the hot path.
    app.addHook('onSend', (req, reply, payload, done) => {
      const status = reply.statusCode;
      if (status >= 400) {
        const code = typeof payload === 'string' ? (ERROR_CODE.exec(payload)?.[1] ?? 'none') : 'none';
        metrics.httpErrors.inc({
          route: req.routeOptions.url ?? 'unmatched',
          method: req.method,
          status: String(status),
          code,
        });
      }
      done(null, payload);
    });
    app.addHook('onClose', async () => metrics.registry.clear());
  },
  { name: 'metrics' },
);

export interface TracingPluginOptions {
  /** A provider to use as it is (tests: an in-memory exporter); else one is made from `env`, if it asks for one. */
  provider?: TracerProvider | undefined;
  env?: NodeJS.ProcessEnv | undefined;
}

/** This instance's tracing; a provider made from the environment is flushed and shut down on close. */
export const tracingPlugin = fp<TracingPluginOptions>(
  async (app, opts) => {
    const env = opts.env ?? process.env;
    let tracing = Tracing.off;
    if (opts.provider || tracesExporters(env).length > 0) {
      const sdk = await import('./tracing-sdk.js');
      const provider = opts.provider ?? sdk.tracerProviderFromEnv(env);
      if (provider) sdk.installGlobals();
      tracing = new Tracing({ provider, owned: !opts.provider });
    }
    app.decorate('tracing', tracing);
    if (tracing.enabled) app.log.info('OpenTelemetry tracing is on');
    app.addHook('onClose', async () => tracing.shutdown());
  },
  { name: 'tracing' },
);
