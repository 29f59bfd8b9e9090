import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SpanKind, type Attributes } from '@opentelemetry/api';
import {
  InMemorySpanExporter,
  SimpleSpanProcessor,
  TracerProvider,
  type ReadableSpan,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall } from '../fake/script.js';
import { tracerProviderFromEnv, TracingConfigError } from '../../src/observability/tracing-sdk.js';
import { Tracing } from '../../src/observability/tracing.js';

/**
 * Keeps every ended span, at once (an exporter may export later), and resolves when one with `name` ends (the run span
 * ends last, after the run's final commit and release).
 */
class SpanRecorder implements SpanProcessor {
  readonly spans: ReadableSpan[] = [];
  private readonly waiters: Array<{ name: string; resolve: (s: ReadableSpan) => void }> = [];
  onStart(): void {}
  onEnd(span: ReadableSpan): void {
    this.spans.push(span);
    for (const w of [...this.waiters]) {
      if (w.name !== span.name) continue;
      this.waiters.splice(this.waiters.indexOf(w), 1);
      w.resolve(span);
    }
  }
  ended(name: string): Promise<ReadableSpan> {
    return new Promise((resolve) => this.waiters.push({ name, resolve }));
  }
  forceFlush = async () => {};
  shutdown = async () => {};
}

const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('OpenTelemetry traces', () => {
  let h: Harness;
  const recorder = new SpanRecorder();
  const exporter = new InMemorySpanExporter();
  let provider: TracerProvider;
  before(async () => {
    // The recorder for the assertions; an in-memory exporter behind the SDK's own processor, as an app would export.
    provider = new TracerProvider({ spanProcessors: [recorder, new SimpleSpanProcessor({ exporter })] });
    h = await startHarness({ tracerProvider: provider });
  });
  after(async () => {
    await h?.close();
    await provider?.shutdown();
  });

  it('traces a two-turn tool loop: run, runner, model calls, turns, tool and commits in one tree', async () => {
    h.fake.setHandler((_req, i) =>
      i === 0
        ? toolCall('get_weather', { location: 'Paris' }, { usage: { input_tokens: 11, output_tokens: 7 } })
        : text('Sunny in Paris.'),
    );
    const runEnded = recorder.ended('session.run');
    const created = await h.api.post('/v1/sessions', { input: 'Weather in Paris?', tools: ['get_weather'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id: string = created.body.id;
    const run = await runEnded;
    const spans = recorder.spans;
    const traceId = run.spanContext().traceId;
    const inTrace = spans.filter((s) => s.spanContext().traceId === traceId);
    const children = (parent: ReadableSpan, name?: string) =>
      inTrace.filter((s) => parentOf(s) === idOf(parent) && (name === undefined || s.name === name));
    const attrs = (s: ReadableSpan): Attributes => s.attributes;

    // The run: the root of its own trace.
    assert.equal(parentOf(run), undefined);
    assert.equal(attrs(run)['gen_ai.conversation.id'], id);
    assert.equal(run.status.code, 1 /* OK */);

    // The SDK's tool runner under the run, with both model calls (its CLIENT spans) under it.
    const [runner, ...moreRunners] = children(run, 'anthropic.messages.tool_runner');
    assert.ok(runner, `a tool-runner span under the run; got ${inTrace.map((s) => s.name).join(', ')}`);
    assert.equal(moreRunners.length, 0);
    assert.equal(attrs(runner)['gen_ai.operation.name'], 'invoke_agent');
    assert.equal(attrs(runner)['gen_ai.conversation.id'], id, 'the request option carries the session');
    const calls = children(runner, 'anthropic.messages.create');
    assert.equal(calls.length, 2);
    for (const c of calls) {
      assert.equal(c.kind, SpanKind.CLIENT);
      assert.equal(attrs(c)['gen_ai.provider.name'], 'anthropic');
      assert.equal(attrs(c)['gen_ai.conversation.id'], id);
    }

    // One turn span per iteration under the run, with the GenAI attributes of its reply.
    const turns = children(run, 'session.turn').sort(
      (a, b) => Number(attrs(a)['trs.iteration']) - Number(attrs(b)['trs.iteration']),
    );
    assert.deepEqual(
      turns.map((t) => [attrs(t)['trs.iteration'], attrs(t)['gen_ai.response.finish_reasons']]),
      [
        [1, ['tool_use']],
        [2, ['end_turn']],
      ],
    );
    assert.equal(attrs(turns[0]!)['gen_ai.usage.input_tokens'], 11);
    assert.equal(attrs(turns[0]!)['gen_ai.usage.output_tokens'], 7);
    assert.equal(typeof attrs(turns[0]!)['gen_ai.request.model'], 'string');
    assert.equal(attrs(turns[0]!)['gen_ai.response.id'], h.fake.requests[0]!.replyId);

    // The tool call (the SDK's execute_tool span) under the first turn; nothing under the second.
    const tools = inTrace.filter((s) => s.attributes['gen_ai.operation.name'] === 'execute_tool');
    assert.equal(tools.length, 1);
    assert.equal(parentOf(tools[0]!), idOf(turns[0]!));
    assert.equal(attrs(tools[0]!)['gen_ai.tool.name'], 'get_weather');
    assert.equal(children(turns[1]!).filter((s) => s.name !== 'session.commit').length, 0);

    // Each iteration's commit under its turn.
    for (const t of turns)
      assert.ok(
        children(t, 'session.commit').length >= 1,
        `a commit under turn ${attrs(t)['trs.iteration']}`,
      );

    await provider.forceFlush();
    assert.ok(exporter.getFinishedSpans().length >= inTrace.length, 'the exporter got the spans too');

    // The model calls carried the trace to the upstream (W3C traceparent).
    for (const r of h.fake.requests) {
      assert.match(String(r.headers['traceparent']), new RegExp(`^00-${traceId}-[0-9a-f]{16}-0[01]$`));
    }
  });
});

describe('tracing configuration', () => {
  it('is off unless OTEL_TRACES_EXPORTER names an exporter, and then costs the SDK client nothing', () => {
    assert.equal(tracerProviderFromEnv({}), undefined);
    assert.equal(tracerProviderFromEnv({ OTEL_TRACES_EXPORTER: 'none' }), undefined);
    assert.equal(
      tracerProviderFromEnv({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' }),
      undefined,
    );
    assert.equal(Tracing.off.sdkOption, false);
    assert.equal(Tracing.off.enabled, false);
  });

  it('builds an OTLP provider from the standard variables and refuses what it cannot do', async () => {
    const p = tracerProviderFromEnv({
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.5',
      OTEL_SERVICE_NAME: 'trs-test',
    });
    assert.ok(p);
    await p.shutdown();
    assert.throws(() => tracerProviderFromEnv({ OTEL_TRACES_EXPORTER: 'zipkin' }), TracingConfigError);
    assert.throws(
      () => tracerProviderFromEnv({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }),
      /http\/protobuf/,
    );
    assert.throws(
      () => tracerProviderFromEnv({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'sometimes' }),
      TracingConfigError,
    );
  });
});
