/**
 * The OpenTelemetry SDK side of tracing: the tracer provider made from the `OTEL_*` variables, and the process-wide
 * context manager and propagator. Imported (dynamically, by the tracing plugin) only when tracing is on: the SDK and
 * its OTLP exporter cost about 8 MB of RSS in a replica that loads them.
 */
import { context, propagation, type Attributes } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider as SdkTracerProvider,
  type Sampler,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace';
import { ConfigError } from '../config.js';
import { SERVICE_NAME, tracesExporters } from './tracing.js';

/** A bad `OTEL_*` value: the process stops at boot with this message, like any configuration error. */
export class TracingConfigError extends ConfigError {}

/**
 * A tracer provider from the environment, or undefined when tracing is off (the default). Read:
 * `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER` (`otlp`, `console`, `none`; a comma list), `OTEL_EXPORTER_OTLP_PROTOCOL`
 * / `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (`http/protobuf` only), `OTEL_EXPORTER_OTLP_ENDPOINT` /
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_TRACES_SAMPLER` (+ `_ARG`), `OTEL_SERVICE_NAME`,
 * `OTEL_RESOURCE_ATTRIBUTES`. The OTLP exporter reads its own headers, timeout and compression variables.
 */
export function tracerProviderFromEnv(env: NodeJS.ProcessEnv): SdkTracerProvider | undefined {
  const names = tracesExporters(env);
  if (names.length === 0) return undefined;
  const spanProcessors: SpanProcessor[] = names.map((name) => {
    if (name === 'otlp') return new BatchSpanProcessor({ exporter: otlpExporter(env) });
    if (name === 'console') return new BatchSpanProcessor({ exporter: new ConsoleSpanExporter() });
    throw new TracingConfigError(`OTEL_TRACES_EXPORTER: unknown exporter "${name}" (otlp, console or none)`);
  });
  return new SdkTracerProvider({
    resource: resourceFromEnv(env),
    sampler: samplerFromEnv(env),
    spanProcessors,
  });
}

function otlpExporter(env: NodeJS.ProcessEnv): OTLPTraceExporter {
  const protocol = (
    env['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'] ??
    env['OTEL_EXPORTER_OTLP_PROTOCOL'] ??
    'http/protobuf'
  )
    .trim()
    .toLowerCase();
  if (protocol !== 'http/protobuf') {
    throw new TracingConfigError(
      `OTEL_EXPORTER_OTLP_PROTOCOL: "${protocol}" is not supported; use http/protobuf (port 4318 of a collector)`,
    );
  }
  const signal = env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']?.trim();
  const base = env['OTEL_EXPORTER_OTLP_ENDPOINT']?.trim();
  // The signal's endpoint is used as it is; the base endpoint gets the signal's path (the OTLP exporter spec).
  const url = signal || (base ? `${base.replace(/\/+$/, '')}/v1/traces` : undefined);
  return new OTLPTraceExporter(url ? { url } : {});
}

function samplerFromEnv(env: NodeJS.ProcessEnv): Sampler {
  const name = (env['OTEL_TRACES_SAMPLER'] ?? 'parentbased_always_on').trim().toLowerCase();
  const arg = Number(env['OTEL_TRACES_SAMPLER_ARG'] ?? '1');
  const ratio = Number.isFinite(arg) && arg >= 0 && arg <= 1 ? arg : 1;
  switch (name) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(ratio);
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) });
    default:
      throw new TracingConfigError(`OTEL_TRACES_SAMPLER: unknown sampler "${name}"`);
  }
}

/** `service.name` (OTEL_SERVICE_NAME, else this service's name) and the `key=value,…` of OTEL_RESOURCE_ATTRIBUTES. */
function resourceFromEnv(env: NodeJS.ProcessEnv) {
  const attributes: Attributes = { 'service.name': SERVICE_NAME };
  for (const pair of (env['OTEL_RESOURCE_ATTRIBUTES'] ?? '').split(',')) {
    const at = pair.indexOf('=');
    if (at <= 0) continue;
    try {
      attributes[decodeURIComponent(pair.slice(0, at).trim())] = decodeURIComponent(
        pair.slice(at + 1).trim(),
      );
    } catch {
      // A malformed percent-escape: that attribute is skipped, as the spec allows.
    }
  }
  if (env['OTEL_SERVICE_NAME']?.trim()) attributes['service.name'] = env['OTEL_SERVICE_NAME'].trim();
  return resourceFromAttributes(attributes);
}

let globalsInstalled = false;

/**
 * Parent–child links across `await` need a context manager, and the SDK's `traceparent` header a propagator: both are
 * process-wide in the OpenTelemetry API, installed once, and only when some instance traces.
 */
export function installGlobals(): void {
  if (globalsInstalled) return;
  globalsInstalled = true;
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
}
