import type { OpenTelemetryOptions } from '@anthropic-ai/sdk';
import {
  context,
  trace,
  SpanKind,
  SpanStatusCode,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';

/**
 * OpenTelemetry traces, configured by the standard `OTEL_*` variables and off unless `OTEL_TRACES_EXPORTER` names an
 * exporter. Off, nothing is created or loaded: no provider, no context manager, no SDK module (tracing-sdk.ts is
 * imported only when tracing is on), the SDK client gets `openTelemetry: false`, and every helper here runs its
 * function as it is (one `undefined` check). Only the OpenTelemetry API is imported here.
 */

/**
 * The exporters `OTEL_TRACES_EXPORTER` names (`none` left out); none when `OTEL_SDK_DISABLED` is true. Tracing is on
 * when this is not empty: only then is the OpenTelemetry SDK loaded (tracing-sdk.ts).
 */
export function tracesExporters(env: NodeJS.ProcessEnv): string[] {
  if (env['OTEL_SDK_DISABLED']?.trim().toLowerCase() === 'true') return [];
  return (env['OTEL_TRACES_EXPORTER'] ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s && s !== 'none');
}

/** The instrumentation scope of the service's own spans. */
const SCOPE = 'toolrunner-sessions';
export const SERVICE_NAME = 'toolrunner-sessions';

export interface TracingOptions {
  /** The provider of this instance's spans; undefined: tracing is off. */
  provider?: TracerProvider | undefined;
  /** Shut the provider down (flushing its spans) when the service closes: true for one made from the environment. */
  owned?: boolean;
}

/** One service instance's tracing: its tracer (or none), the SDK client's option, and span helpers. */
export class Tracing {
  readonly tracer: Tracer | undefined;
  private readonly provider: TracerProvider | undefined;
  private readonly owned: boolean;

  constructor(opts: TracingOptions = {}) {
    this.provider = opts.provider;
    this.owned = opts.owned ?? false;
    this.tracer = this.provider?.getTracer(SCOPE);
  }

  static readonly off = new Tracing();

  get enabled(): boolean {
    return this.tracer !== undefined;
  }

  /**
   * The Anthropic client's `openTelemetry` option: its model-call, tool-runner and tool spans on this instance's
   * provider (metadata only: no prompt or reply content on spans), or none at all when tracing is off.
   */
  get sdkOption(): OpenTelemetryOptions | false {
    return this.provider
      ? { tracerProvider: this.provider, traces: { contentMode: 'metadata_only' } }
      : false;
  }

  /** Starts a span under `parent` (or the current context). Undefined when tracing is off. */
  start(name: string, attributes: Attributes, parent?: Context, kind = SpanKind.INTERNAL): Span | undefined {
    return this.tracer?.startSpan(name, { kind, attributes }, parent ?? context.active());
  }

  /** Flushes and stops the provider if this instance made it. */
  async shutdown(): Promise<void> {
    const p = this.provider;
    if (this.owned && p && 'shutdown' in p && typeof p.shutdown === 'function') await p.shutdown();
  }
}

/** Ends `span` with the outcome of its operation: OK, or ERROR with `error.type` (an abort is left unset). */
export function endSpan(span: Span | undefined, err?: unknown): void {
  if (!span) return;
  if (err === undefined) span.setStatus({ code: SpanStatusCode.OK });
  else if (!isAbortError(err)) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
    span.setAttribute('error.type', err instanceof Error ? err.name : 'error');
  }
  span.end();
}

function isAbortError(err: unknown): boolean {
  return err instanceof Error && (err.name === 'AbortError' || err.name === 'APIUserAbortError');
}

/** `context` with `span` current, or undefined without a span. */
export function withSpan(span: Span | undefined, parent: Context = context.active()): Context | undefined {
  return span ? trace.setSpan(parent, span) : undefined;
}
