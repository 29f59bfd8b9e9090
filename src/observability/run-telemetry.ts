import { context, type Context, type Span } from '@opentelemetry/api';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { Metrics, seconds } from './metrics.js';
import { Tracing, endSpan, withSpan } from './tracing.js';

/**
 * The metrics and spans of one run, as the engine reports them with one-line calls. Spans (when tracing is on):
 *
 *   session.run                                  the run, from its claim to its end (gen_ai.conversation.id = session)
 *   ├─ anthropic.messages.tool_runner            the SDK's (one per runner), with its model calls under it:
 *   │  └─ anthropic.messages.create              one per turn (the SDK's CLIENT span: status, usage, request id)
 *   ├─ session.turn                              one per iteration: gen_ai.request.* / response.* / usage.*
 *   │  ├─ anthropic.custom_tool_use <tool>       the SDK's span of each server tool the runner runs
 *   │  └─ session.commit                         each commit of the iteration
 *   ├─ execute_tool <tool>                       a server tool run outside a runner (a resumed or approved step)
 *   └─ session.commit                            commits outside a turn (tool steps, the end of the run)
 *
 * The model call sits under the SDK's tool-runner span rather than under the turn: the SDK starts it in the context it
 * captured when the runner started. Times are the engine's own (`performance.now()` ms), turned into seconds here.
 */
export class RunTelemetry {
  private runCtx: Context | undefined;
  private turnSpan: Span | undefined;
  private turnCtx: Context | undefined;
  /** performance.now() at the start of the turn in flight; -1 when none is. */
  private turnT0 = -1;

  constructor(
    private readonly metrics: Metrics,
    private readonly tracing: Tracing,
    readonly sessionId: string,
  ) {}

  /** Runs the whole run with its span current (the SDK's spans then nest under it); ends the span after. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    this.metrics.runsStarted.inc();
    const span = this.tracing.start('session.run', {
      'gen_ai.conversation.id': this.sessionId,
      'gen_ai.provider.name': 'anthropic',
    });
    this.runCtx = withSpan(span);
    try {
      const out = await (this.runCtx ? context.with(this.runCtx, fn) : fn());
      this.closeTurn();
      endSpan(span);
      return out;
    } catch (err) {
      this.closeTurn(err);
      endSpan(span, err);
      throw err;
    }
  }

  /** A turn starts: the runner has sent (or is sending) iteration `iteration`'s request. */
  turnStarted(iteration: number, request: { model: string; max_tokens: number }): void {
    this.closeTurn();
    this.turnT0 = performance.now();
    if (!this.tracing.enabled) return;
    this.turnSpan = this.tracing.start(
      'session.turn',
      {
        'gen_ai.conversation.id': this.sessionId,
        'gen_ai.provider.name': 'anthropic',
        'gen_ai.request.model': request.model,
        'gen_ai.request.max_tokens': request.max_tokens,
        'trs.iteration': iteration,
      },
      this.runCtx,
    );
    this.turnCtx = withSpan(this.turnSpan, this.runCtx);
  }

  /** The turn's reply is in. `timings` as the iteration record has them (ms from the turn start). */
  turnReplied(message: BetaMessage, timings: { upstream_ms: number; first_event_ms: number | null }): void {
    this.metrics.turn(message.stop_reason);
    this.metrics.upstreamDuration.observe(seconds(timings.upstream_ms));
    if (timings.first_event_ms !== null)
      this.metrics.upstreamFirstEvent.observe(seconds(timings.first_event_ms));
    const u = message.usage;
    this.turnSpan?.setAttributes({
      'gen_ai.response.id': message.id,
      'gen_ai.response.model': message.model,
      'gen_ai.response.finish_reasons': [message.stop_reason ?? 'none'],
      'gen_ai.usage.input_tokens': u?.input_tokens ?? 0,
      'gen_ai.usage.output_tokens': u?.output_tokens ?? 0,
      'gen_ai.usage.cache_read.input_tokens': u?.cache_read_input_tokens ?? 0,
      'gen_ai.usage.cache_creation.input_tokens': u?.cache_creation_input_tokens ?? 0,
    });
  }

  /** The iteration is committed (reply, tool results): the turn's duration is observed and its span ends. */
  turnEnded(): void {
    this.closeTurn();
  }

  /** Runs `fn` with the turn's span current (so the SDK's tool spans nest under the turn). */
  inTurn<T>(fn: () => T): T {
    const ctx = this.turnCtx ?? this.runCtx;
    return ctx ? context.with(ctx, fn) : fn();
  }

  /** Times a commit (`fn`: one fenced script call, retried through an outage) under the turn or the run. */
  async commit<T>(fn: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    const span = this.tracing.enabled
      ? this.tracing.start('session.commit', { 'db.system.name': 'redis' }, this.turnCtx ?? this.runCtx)
      : undefined;
    try {
      const out = await fn();
      endSpan(span);
      return out;
    } catch (err) {
      endSpan(span, err);
      throw err;
    } finally {
      this.metrics.commitDuration.observe(seconds(performance.now() - t0));
    }
  }

  /** Live events given up (live-news.ts, stream-relay.ts); none: nothing counted. */
  liveEventsDropped(n: number, reason: 'buffer_full' | 'outage' | 'error'): void {
    if (n > 0) this.metrics.liveEventsDropped.inc({ reason }, n);
  }

  /** A commit is sent again after an outage. */
  commitRetried(): void {
    this.metrics.commitRetries.inc();
  }

  /** Runs a server tool outside a runner (the runner's own runs get the SDK's span) in an `execute_tool` span. */
  async tool<T>(name: string, toolUseId: string, fn: () => Promise<T>): Promise<T> {
    const span = this.tracing.enabled
      ? this.tracing.start(
          `execute_tool ${name}`,
          {
            'gen_ai.operation.name': 'execute_tool',
            'gen_ai.tool.name': name,
            'gen_ai.tool.call.id': toolUseId,
            'gen_ai.tool.type': 'function',
            'gen_ai.conversation.id': this.sessionId,
          },
          this.runCtx,
        )
      : undefined;
    if (!span) return fn();
    try {
      const out = await context.with(withSpan(span, this.runCtx)!, fn);
      endSpan(span);
      return out;
    } catch (err) {
      endSpan(span, err);
      throw err;
    }
  }

  /** The run ends the session as failed with `code` (a closed set). */
  failed(code: string): void {
    this.metrics.runsFailed.inc({ code });
  }

  private closeTurn(err?: unknown): void {
    if (this.turnT0 < 0) return;
    this.metrics.turnDuration.observe(seconds(performance.now() - this.turnT0));
    this.turnT0 = -1;
    endSpan(this.turnSpan, err);
    this.turnSpan = undefined;
    this.turnCtx = undefined;
  }
}

/**
 * Times one server tool call (ms, as the engine measures it) by tool and outcome. `tool` is a name of the server's
 * own or an operator's (a tenant's tools are labelled by kind: `ServerTool.metricLabel`).
 */
export function toolRan(metrics: Metrics, tool: string, ms: number, ok: boolean): void {
  metrics.toolDuration.observe({ tool, outcome: ok ? 'ok' : 'error' }, seconds(ms));
}
