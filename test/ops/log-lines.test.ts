/**
 * What an on-call engineer reads: one `request` line per request at info (route pattern, method, status, ms,
 * tenant, request_id; never a key or a body), and a `run started` / `run ended` pair per run carrying the session and
 * tenant, so "what happened to session X / request Y" is answered from the log alone.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { parseExposition } from '../helpers/prometheus.js';
import { overloaded, text } from '../fake/script.js';
import WebSocket from 'ws';

let redis: TestRedis;
let fake: FakeAnthropic;
let svc: ServiceProcess;
const KEY = 'key-logs-0123456789';

before(async () => {
  redis = await startTestRedis();
  fake = await startFakeAnthropic({ strictAlternation: true });
  svc = await spawnService(serviceEnv(redis.url, fake.url, { API_KEYS: `acme:${KEY}`, LOG_LEVEL: 'info' }));
});
after(async () => {
  await svc?.stop();
  await fake?.close();
  await redis?.stop();
});

test('a request line per request and a start/end pair per run, with the fields named once', async () => {
  const api = svc.api.as(KEY);
  const created = await api.req('POST', '/v1/sessions', {
    input: 'What is the weather in Paris?',
    tools: ['get_weather'],
  });
  assert.equal(created.status, 201);
  const id: string = created.body.id;
  await api.waitStatus(id, 'idle', 30_000);
  const missing = await api.req('GET', '/v1/sessions/ses_missing00000000');
  assert.equal(missing.status, 404);
  const reqId = missing.headers.get('x-request-id');

  const created_line = await svc.waitForLog(
    (l) => l['msg'] === 'request' && l['route'] === '/v1/sessions' && l['method'] === 'POST',
  );
  assert.equal(created_line['status'], 201);
  assert.equal(created_line['tenant'], 'acme');
  assert.equal(typeof created_line['ms'], 'number');
  assert.equal(typeof created_line['request_id'], 'string');
  const missing_line = await svc.waitForLog((l) => l['msg'] === 'request' && l['status'] === 404);
  assert.equal(missing_line['route'], '/v1/sessions/:id', 'the pattern, not the raw URL');
  if (reqId) assert.equal(missing_line['request_id'], reqId, 'the id the answer carries');

  const started = await svc.waitForLog((l) => l['msg'] === 'run started' && l['session'] === id);
  assert.equal(started['tenant'], 'acme');
  // The run that finished the session ended without an abort. On a busy machine its lease (2 s here) can lapse
  // mid-run: the sweep hands the run over and the first one ends `fenced` (one CI run at load 12 did); nothing else.
  const ended = await svc.waitForLog(
    (l) => l['msg'] === 'run ended' && l['session'] === id && l['abort'] === null,
  );
  assert.equal(typeof ended['ms'], 'number');
  const ends = svc.logs().filter((l) => l['msg'] === 'run ended' && l['session'] === id);
  assert.deepEqual(
    ends.filter((l) => l['abort'] !== null && l['abort'] !== 'fenced'),
    [],
    'a run of this session ends done, or fenced and handed over',
  );

  const text = JSON.stringify(svc.logs());
  assert.ok(!text.includes(KEY), 'no key in the log');
  assert.ok(!text.includes('What is the weather'), 'no body in the log');
  // Probes stay out of the info log.
  await api.req('GET', '/healthz');
  assert.ok(!svc.logs().some((l) => l['msg'] === 'request' && l['route'] === '/healthz'));
});

test('an incident followed by request id and session id alone: upstream failures, an error body, a stream', async () => {
  const api = svc.api.as(KEY);
  // A 529 the SDK retries, then a stream that breaks with an error event: the run fails.
  fake.enqueue(overloaded(), text('partial answer', { streamErrorAfterEvents: 3 }));
  const created = await api.req(
    'POST',
    '/v1/sessions',
    { input: 'incident' },
    { 'x-request-id': 'inc-create-1' },
  );
  assert.equal(created.status, 201);
  const id: string = created.body.id;
  assert.equal((await api.waitStatus(id, 'failed', 30_000)).error.code, 'upstream_overloaded');

  // From the request id to the session, and from the session to what failed upstream.
  const line = await svc.waitForLog((l) => l['msg'] === 'request' && l['request_id'] === 'inc-create-1');
  assert.equal(line['session'], id, "the create's line names the session it made");
  const failedAttempt = await svc.waitForLog(
    (l) => l['msg'] === 'upstream request failed' && l['session'] === id,
  );
  assert.equal(failedAttempt['tenant'], 'acme');
  assert.equal(failedAttempt['status'], 529);
  assert.equal(failedAttempt['error_type'], 'overloaded_error');
  assert.equal(failedAttempt['attempt'], 0);
  assert.equal(failedAttempt['iteration'], 1);
  assert.equal(typeof failedAttempt['model'], 'string');
  assert.equal(typeof failedAttempt['upstream_request_id'], 'string');
  const broke = await svc.waitForLog((l) => l['msg'] === 'upstream stream failed' && l['session'] === id);
  assert.equal(broke['error_type'], 'overloaded_error');
  assert.equal(broke['iteration'], 1);
  const runFailed = await svc.waitForLog((l) => l['msg'] === 'run failed' && l['session'] === id);
  assert.equal(runFailed['error_code'], 'upstream_overloaded');
  assert.equal(runFailed['tenant'], 'acme');
  assert.equal(runFailed['iteration'], 1);
  assert.equal(typeof runFailed['model'], 'string');
  const started = await svc.waitForLog((l) => l['msg'] === 'run started' && l['session'] === id);
  assert.equal(typeof started['model'], 'string');
  const metrics = parseExposition((await svc.api.get('/metrics')).body as string);
  assert.ok(
    metrics.some(
      (s) =>
        s.name === 'trs_upstream_stream_errors_total' &&
        s.labels['error_type'] === 'overloaded_error' &&
        s.value > 0,
    ),
    'the failure mid-stream is counted',
  );

  // An error body names its request id, which its log line carries.
  const missing = await api.req('GET', '/v1/sessions/ses_missing00000001', undefined, {
    'x-request-id': 'inc-404',
  });
  assert.equal(missing.status, 404);
  assert.equal(missing.body.error.request_id, 'inc-404');
  const badUrl = await fetch(`${svc.url}/v1/sessions/%ff`, { headers: { 'x-request-id': 'inc-bad-url' } });
  assert.equal(badUrl.status, 400);
  assert.equal(((await badUrl.json()) as { error: { request_id: string } }).error.request_id, 'inc-bad-url');
  await svc.waitForLog(
    (l) => l['msg'] === 'request' && l['request_id'] === 'inc-bad-url' && l['status'] === 400,
  );

  // A WebSocket: its 101 carries the id, its close writes the connection's one line.
  const ws = new WebSocket(`${svc.url.replace('http', 'ws')}/v1/sessions/${id}/stream`, {
    headers: { authorization: `Bearer ${KEY}`, 'x-request-id': 'inc-ws' },
  });
  // ws emits `open` right after `upgrade`, in the same turn: both are listened for at once.
  let upgraded: string | undefined;
  ws.once('upgrade', (res) => (upgraded = res.headers['x-request-id'] as string | undefined));
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  assert.equal(upgraded, 'inc-ws');
  ws.close(1000);
  const closed = await svc.waitForLog((l) => l['msg'] === 'stream closed' && l['request_id'] === 'inc-ws');
  assert.equal(closed['session'], id);
  assert.equal(closed['close_code'], 1000);
});

test('no line names a field twice (a JSON parser keeps one of them, or refuses the line)', () => {
  // After the cases above: requests, runs, an upstream 529, a stream that failed, a WebSocket.
  assert.ok(svc.logs().some((l) => l['msg'] === 'upstream stream failed'));
  assert.deepEqual(svc.duplicateKeyLines(), []);
});
