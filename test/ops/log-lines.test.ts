/**
 * What an on-call engineer reads: one `request` line per request at info (route pattern, method, status, ms,
 * tenant, reqId; never a key or a body), and a `run started` / `run ended` pair per run carrying the session and
 * tenant, so "what happened to session X / request Y" is answered from the log alone.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';

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
  assert.equal(typeof created_line['reqId'], 'string');
  const missing_line = await svc.waitForLog((l) => l['msg'] === 'request' && l['status'] === 404);
  assert.equal(missing_line['route'], '/v1/sessions/:id', 'the pattern, not the raw URL');
  if (reqId) assert.equal(missing_line['reqId'], reqId, 'the id the answer carries');

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
