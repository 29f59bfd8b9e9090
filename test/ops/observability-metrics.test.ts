import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { once } from 'node:events';
import { startHarness, type Harness } from '../helpers/service.js';
import { parseExposition, value, type Sample } from '../helpers/prometheus.js';
import { connectSse, connectWs, isFinalStatus, type Envelope } from '../fixtures/event-clients.js';
import { text, toolCall } from '../fake/script.js';
import { overloaded } from '../fake/server.js';
import { compareIds } from '../../src/events/cursor.js';
import { Metrics, redisErrorKind } from '../../src/observability/metrics.js';

const runEnded = (e: Envelope, all: Envelope[]) =>
  isFinalStatus(e) && all.some((x) => x.type === 'turn.completed' && compareIds(x.id, e.id) < 0);

describe('Prometheus metrics', () => {
  let h: Harness;
  before(async () => {
    // With API keys: /metrics still answers without one (it lives outside the /v1 scope), as Prometheus scrapes it.
    h = await startHarness({ env: { API_KEYS: 'acme:key-acme' } });
  });
  after(async () => h?.close());

  async function scrape(): Promise<{ text: string; samples: Sample[] }> {
    const res = await fetch(`${h.service.url}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    const body = await res.text();
    return { text: body, samples: parseExposition(body) };
  }

  /** Scrapes until `pred` holds (a gauge that follows a socket's close); bounded. */
  async function scrapeUntil(pred: (s: Sample[]) => boolean, what: string): Promise<Sample[]> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const { samples } = await scrape();
      if (pred(samples)) return samples;
      if (Date.now() > deadline) throw new Error(`metrics never showed ${what}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  it('measures a two-turn tool loop watched over WebSocket and SSE, with bounded labels', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    h.fake.setHandler(async (_req, i) => {
      if (i === 0) {
        await gate;
        return toolCall('get_weather', { location: 'Paris' });
      }
      return text('Sunny.');
    });
    const created = await h.api.post('/v1/sessions', { input: 'Weather in Paris?', tools: ['get_weather'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id: string = created.body.id;
    const ws = await connectWs(h.service.url, id, { token: 'key-acme' });
    const sse = await connectSse(h.service.url, id, { token: 'key-acme' });
    const open = await scrapeUntil(
      (s) =>
        value(s, 'trs_event_stream_connections', { transport: 'ws' }) === 1 &&
        value(s, 'trs_event_stream_connections', { transport: 'sse' }) === 1 &&
        value(s, 'trs_active_runs') === 1,
      'one open stream per transport and the run (its first turn waits at the fake)',
    );
    assert.equal(value(open, 'trs_waiting_runs'), 0);
    release();
    await ws.waitEvent((e) => runEnded(e, ws.events.items), 'the run end over WebSocket');
    await sse.waitEvent((e) => runEnded(e, sse.events.items), 'the run end over SSE');

    // A turn's duration is observed once its commit returned, which may be after the client saw the run end.
    await scrapeUntil((s) => value(s, 'trs_turn_duration_seconds_count') === 2, 'both turns timed');
    const { text: body, samples } = await scrape();
    assert.equal(value(samples, 'trs_runs_started_total'), 1);
    assert.equal(value(samples, 'trs_turns_total', { stop_reason: 'tool_use' }), 1);
    assert.equal(value(samples, 'trs_turns_total', { stop_reason: 'end_turn' }), 1);
    assert.equal(value(samples, 'trs_upstream_duration_seconds_count'), 2);
    assert.equal(value(samples, 'trs_upstream_first_event_seconds_count'), 2, 'both turns were streamed');
    assert.equal(value(samples, 'trs_turn_duration_seconds_count'), 2);
    assert.ok(
      value(samples, 'trs_turn_duration_seconds_sum')! >=
        value(samples, 'trs_upstream_duration_seconds_sum')! - 0.01,
    );
    assert.equal(
      value(samples, 'trs_tool_duration_seconds_count', { tool: 'get_weather', outcome: 'ok' }),
      1,
    );
    assert.ok(value(samples, 'trs_commit_duration_seconds_count')! >= 2, 'at least one commit per iteration');
    assert.equal(value(samples, 'trs_commit_retries_total'), 0);
    assert.ok(value(samples, 'trs_events_relayed_total')! > 0);
    assert.ok(value(samples, 'trs_relay_lag_seconds_count')! > 0, 'live batches were fanned out');
    assert.ok(value(samples, 'trs_replay_pages_total', { source: 'stream' })! >= 2, 'one replay per client');
    assert.equal(value(samples, 'trs_event_streams_total', { transport: 'ws' }), 1);
    assert.equal(value(samples, 'trs_event_streams_total', { transport: 'sse' }), 1);
    // Never a session id (nor any other unbounded value) in a label.
    assert.ok(!body.includes(id), 'no session id in /metrics');
    // prom-client's default process and event-loop metrics.
    for (const name of [
      'process_cpu_user_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_p99_seconds',
    ]) {
      assert.ok(value(samples, name) !== undefined, name);
    }

    ws.close();
    sse.close();
    await scrapeUntil(
      (s) =>
        value(s, 'trs_event_stream_connections', { transport: 'ws' }) === 0 &&
        value(s, 'trs_event_stream_connections', { transport: 'sse' }) === 0,
      'both streams closed',
    );
  });

  it('counts 4xx answers by route pattern and error code, never by URL', async () => {
    const missing = 'ses_0000000000missing';
    assert.equal((await h.api.get(`/v1/sessions/${missing}`)).status, 404);
    assert.equal((await h.api.get(`/v1/sessions/${missing}`)).status, 404);
    assert.equal((await h.api.get('/no/such/route')).status, 404);
    assert.equal((await h.api.post('/v1/sessions', { input: 5 })).status, 400);
    const { text: body, samples } = await scrape();
    assert.equal(
      value(samples, 'trs_http_errors_total', {
        route: '/v1/sessions/:id',
        method: 'GET',
        status: '404',
        code: 'session_not_found',
      }),
      2,
    );
    assert.equal(
      value(samples, 'trs_http_errors_total', { route: 'unmatched', status: '404', code: 'route_not_found' }),
      1,
    );
    assert.equal(
      value(samples, 'trs_http_errors_total', {
        route: '/v1/sessions',
        method: 'POST',
        status: '400',
        code: 'invalid_request',
      }),
      1,
    );
    assert.ok(!body.includes(missing) && !body.includes('/no/such/route'), 'no URL in a label');
  });

  it('names Redis errors by a closed set of kinds', () => {
    const err = (code: string) => Object.assign(new Error('x'), { code });
    assert.equal(redisErrorKind(err('ECONNREFUSED')), 'connection_refused');
    assert.equal(redisErrorKind(err('ECONNRESET')), 'connection_reset');
    assert.equal(redisErrorKind(new Error('Command timed out')), 'timeout');
    assert.equal(redisErrorKind(err('ENOTFOUND')), 'dns');
    assert.equal(redisErrorKind(Object.assign(new Error('x'), { name: 'ClusterAllFailedError' })), 'cluster');
    assert.equal(redisErrorKind(new Error('anything else: ses_abc')), 'other');
    assert.equal(redisErrorKind('not even an error'), 'other');
  });

  it('counts turns with an unknown stop reason as other, and keeps registries apart', async () => {
    const a = new Metrics({ defaultMetrics: false });
    const b = new Metrics({ defaultMetrics: false });
    a.turn('end_turn');
    a.turn('a_new_reason_from_a_newer_api');
    a.turn(null);
    a.webhook('delivered');
    const sa = parseExposition(await a.text());
    assert.equal(value(sa, 'trs_turns_total', { stop_reason: 'end_turn' }), 1);
    assert.equal(value(sa, 'trs_turns_total', { stop_reason: 'other' }), 2);
    assert.equal(value(sa, 'trs_webhook_deliveries_total', { outcome: 'delivered' }), 1);
    assert.equal(
      value(parseExposition(await b.text()), 'trs_turns_total', { stop_reason: 'end_turn' }),
      undefined,
    );
  });

  it('counts every upstream attempt by status class and error type, and the SDK retries', async () => {
    const before = (await scrape()).samples;
    const count = (samples: Sample[], labels: Record<string, string>) =>
      value(samples, 'trs_upstream_requests_total', labels) ?? 0;
    const retries = (samples: Sample[]) => value(samples, 'trs_upstream_retries_total') ?? 0;
    // Two 529s, then an answer: three attempts of one SDK call (the harness allows one retry: the second 529 is
    // the call's failure, and the run's resume makes the third attempt).
    h.fake.enqueue(overloaded({ retryAfterMs: 5 }), overloaded({ retryAfterMs: 5 }), text('fine'));
    const created = await h.api.as('key-acme').req('POST', '/v1/sessions', { input: 'hello' });
    const failed = await h.api.as('key-acme').waitStatus(created.body.id, ['idle', 'failed'], 20_000);
    assert.equal(failed.status, 'failed');
    await h.api.as('key-acme').req('POST', `/v1/sessions/${created.body.id}/resume`);
    await h.api.as('key-acme').waitStatus(created.body.id, 'idle', 20_000);
    const after = (await scrape()).samples;
    const overloadedLabels = { status_class: '5xx', error_type: 'overloaded_error' };
    assert.equal(count(after, overloadedLabels) - count(before, overloadedLabels), 2);
    const ok = { status_class: '2xx', error_type: 'none' };
    assert.ok(count(after, ok) - count(before, ok) >= 1);
    assert.equal(retries(after) - retries(before), 1, 'the second 529 was the SDK retrying');
  });

  it('an upstream that refuses connections: request-level connection errors, no stream error', async () => {
    // A port nothing listens on (taken, then given back).
    const probe = net.createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const dead = await startHarness({
      redis: h.redis,
      fakeServer: h.fake,
      env: { API_KEYS: 'acme:key-acme', ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}` },
    });
    try {
      const api = dead.api.as('key-acme');
      const created = await api.req('POST', '/v1/sessions', { input: 'hello' });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.equal((await api.waitStatus(created.body.id, ['idle', 'failed'], 20_000)).status, 'failed');
      const samples = parseExposition(await (await fetch(`${dead.service.url}/metrics`)).text());
      // The SDK's two attempts (the harness allows one retry), neither with an answer.
      assert.equal(
        value(samples, 'trs_upstream_requests_total', {
          status_class: 'none',
          error_type: 'connection_error',
        }),
        2,
      );
      assert.deepEqual(
        samples.filter((s) => s.name === 'trs_upstream_stream_errors_total' && s.value > 0),
        [],
        'nothing failed after its headers: there were none',
      );
    } finally {
      await dead.close();
    }
  });
});
