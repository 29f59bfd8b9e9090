/**
 * Contract §7.1 and §7.2 (docs: /work/shared/spec/sessions-api.md), the claims no other test asserts at their
 * edges: the bounds of a tenant tool's PUT and of a claim (the last value taken, the first refused, and with which
 * code), the defaults answered, the exact fields of a claimed task, the default lease, a worker tool's `workers`
 * once a worker claimed, the worker protocol and the registry refused to a client token, a later PUT leaving a
 * session's copy be, and a client token's longest ttl_s.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startMcpServer, type TestMcpServer } from '../helpers/mcp-server.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';

const worker = {
  description: 'Look an order up.',
  input_schema: { type: 'object', properties: { id: { type: 'number' } } },
  runner: { type: 'worker' },
};

/** Contract §3: a refusal of a body is 400 `invalid_request` with the zod issues in `details`. */
function invalid(res: { status: number; body: any }, what: string): void {
  assert.equal(res.status, 400, `${what}: ${JSON.stringify(res.body)}`);
  assert.equal(res.body.error.code, 'invalid_request', what);
  assert.ok(Array.isArray(res.body.error.details) && res.body.error.details.length > 0, what);
}

/** Within `slackMs` of `expectedMs`. */
function near(iso: string, expectedMs: number, slackMs: number, what: string): void {
  const at = Date.parse(iso);
  assert.ok(Number.isFinite(at), `${what}: ${iso}`);
  assert.ok(
    Math.abs(at - expectedMs) < slackMs,
    `${what}: ${iso}, expected about ${new Date(expectedMs).toISOString()}`,
  );
}

describe('contract §7.1 and §7.2 at their edges', { timeout: 180_000 }, () => {
  let h: Harness;
  let a: Api;
  let b: Api;
  before(async () => {
    // TOOL_TASK_LEASE_MS left at its default (contract: 30000).
    h = await startHarness({ env: { API_KEYS: 'acme:key-a,globex:key-b' } });
    a = h.api;
    b = h.api.as('key-b');
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('PUT /v1/tools/:name: defaults answered; timeout_ms 1000..3600000, max_attempts 1..10, name 1..64 at their edges', async () => {
    const created = await a.req('PUT', '/v1/tools/edge_defaults', worker);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.name, 'edge_defaults');
    assert.deepEqual(created.body.runner, { type: 'worker' });
    assert.equal(created.body.idempotent, false);
    assert.equal(created.body.read_only, false);
    assert.equal(created.body.timeout_ms, 600_000);
    assert.equal(created.body.max_attempts, 3);
    assert.ok(!('secret' in created.body), 'a worker tool has no secret');

    const edges: Array<[string, number, boolean]> = [
      ['timeout_ms', 999, false],
      ['timeout_ms', 1000, true],
      ['timeout_ms', 3_600_000, true],
      ['timeout_ms', 3_600_001, false],
      ['timeout_ms', 1000.5, false],
      ['max_attempts', 0, false],
      ['max_attempts', 1, true],
      ['max_attempts', 10, true],
      ['max_attempts', 11, false],
    ];
    for (const [field, value, ok] of edges) {
      const res = await a.req('PUT', '/v1/tools/edge_bounds', { ...worker, [field]: value });
      if (!ok) {
        invalid(res, `${field} ${value}`);
        continue;
      }
      assert.ok(res.status === 201 || res.status === 200, `${field} ${value}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body[field], value, `${field} ${value}`);
      assert.equal((await a.get('/v1/tools/edge_bounds')).body[field], value, `${field} ${value} kept`);
    }
    for (const flag of ['idempotent', 'read_only']) {
      const res = await a.req('PUT', '/v1/tools/edge_bounds', { ...worker, [flag]: true });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body[flag], true, flag);
    }

    const longest = 'a'.repeat(64);
    const named = await a.req('PUT', `/v1/tools/${longest}`, worker);
    assert.equal(named.status, 201, JSON.stringify(named.body));
    assert.equal(named.body.name, longest);
    assert.equal((await a.get(`/v1/tools/${longest}`)).status, 200);
    assert.equal((await a.req('DELETE', `/v1/tools/${longest}`)).status, 200);
    for (const name of ['a'.repeat(65), 'a.b', 'a%20b', '%C3%A9t%C3%A9'])
      invalid(await a.req('PUT', `/v1/tools/${name}`, worker), `name ${name}`);
    for (const name of ['A-Z_09', '-', '_'])
      assert.equal((await a.req('PUT', `/v1/tools/${name}`, worker)).status, 201, name);
  });

  it('claim: max 1..100 (default 1), wait_ms 0..30000; a task has exactly the contract’s fields; lease 30000 by default', async () => {
    for (const [body, what] of [
      [{ tools: ['edge_claim'], max: 0 }, 'max 0'],
      [{ tools: ['edge_claim'], max: 101 }, 'max 101'],
      [{ tools: ['edge_claim'], max: 1.5 }, 'max 1.5'],
      [{ tools: ['edge_claim'], wait_ms: -1 }, 'wait_ms -1'],
      [{ tools: ['edge_claim'], wait_ms: 30_001 }, 'wait_ms 30001'],
      [{ tools: ['edge_claim'], worker_id: 7 }, 'worker_id not a string'],
      [{ max: 1 }, 'no tools'],
    ] as const)
      invalid(await a.post('/v1/tool-tasks/claim', body), what);
    const none = await a.post('/v1/tool-tasks/claim', { tools: ['edge_claim'], max: 100, wait_ms: 0 });
    assert.equal(none.status, 200, JSON.stringify(none.body));
    assert.deepEqual(none.body, { tasks: [] }, 'empty when nothing came within wait_ms');

    assert.equal((await a.req('PUT', '/v1/tools/edge_claim', worker)).status, 201);
    h.fake.enqueue(
      toolCalls([toolUse('edge_claim', { id: 1 }, 'toolu_e1'), toolUse('edge_claim', { id: 2 }, 'toolu_e2')]),
      text('Both found.'),
    );
    const id = (await a.post('/v1/sessions', { input: 'find 1 and 2', tools: ['edge_claim'] })).body.id;
    // wait_ms at its bound is taken; `max` left out claims one call of the two.
    const first = await a.post('/v1/tool-tasks/claim', {
      tools: ['edge_claim'],
      wait_ms: 30_000,
      worker_id: 'w-edge',
    });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.body.tasks.length, 1, 'max defaults to 1');
    const claimedAt = Date.now();
    const task = first.body.tasks[0];
    // The contract's fields, each there (`lease_ms`, the lease's length, is the service's addition: docs/API.md).
    for (const field of [
      'id',
      'session_id',
      'tool_use_id',
      'name',
      'input',
      'attempt',
      'idempotency_key',
      'lease_expires_at',
    ])
      assert.ok(field in task, `${field} in ${JSON.stringify(task)}`);
    assert.match(task.id, /^tt_/);
    assert.equal(task.session_id, id);
    assert.equal(task.name, 'edge_claim');
    assert.equal(task.attempt, 1);
    assert.equal(task.idempotency_key, `${id}:${task.tool_use_id}`);
    near(
      task.lease_expires_at,
      claimedAt + 30_000,
      5000,
      'the lease is TOOL_TASK_LEASE_MS (30000) by default',
    );
    // max at its bound is taken: the other call.
    const second = await a.post('/v1/tool-tasks/claim', {
      tools: ['edge_claim'],
      max: 100,
      wait_ms: 10_000,
      worker_id: 'w-edge',
    });
    assert.equal(second.status, 200, JSON.stringify(second.body));
    assert.equal(second.body.tasks.length, 1);
    const other = second.body.tasks[0];
    assert.deepEqual(
      [task.tool_use_id, other.tool_use_id].sort(),
      ['toolu_e1', 'toolu_e2'],
      'each call offered once',
    );

    const hb = await a.post(`/v1/tool-tasks/${task.id}/heartbeat`);
    assert.equal(hb.status, 200, JSON.stringify(hb.body));
    near(hb.body.lease_expires_at, Date.now() + 30_000, 5000, 'a heartbeat renews for TOOL_TASK_LEASE_MS');
    // Another tenant's worker: 404 task_not_found, on every route of the protocol.
    for (const route of ['heartbeat', 'result']) {
      const res = await b.post(
        `/v1/tool-tasks/${task.id}/${route}`,
        route === 'result' ? { content: 'x' } : {},
      );
      assert.equal(res.status, 404, route);
      assert.equal(res.body.error.code, 'task_not_found', route);
    }

    // The worker tool's `workers`, on GET of it and in GET /v1/tools: the worker that claimed, and when.
    const one = (await a.get('/v1/tools/edge_claim')).body;
    const listed = ((await a.get('/v1/tools')).body.data as any[]).find((t) => t.name === 'edge_claim');
    for (const [what, tool] of [
      ['GET /v1/tools/edge_claim', one],
      ['GET /v1/tools', listed],
    ] as const) {
      assert.deepEqual(tool.runner, { type: 'worker' }, what);
      assert.deepEqual(Object.keys(tool.workers).sort(), ['active', 'last_seen_at'], what);
      assert.equal(tool.workers.active, 1, `${what}: one worker_id`);
      near(tool.workers.last_seen_at, Date.now(), 10_000, `${what}: last_seen_at`);
    }

    for (const t of [task, other])
      assert.equal(
        (await a.post(`/v1/tool-tasks/${t.id}/result`, { content: `found ${t.input.id}` })).status,
        200,
      );
    const done = await a.waitStatus(id, 'idle', 20_000);
    assert.equal(done.stop_reason, 'end_turn');
    const started = ((await a.get(`/v1/sessions/${id}/events?limit=500`)).body.data as any[]).filter(
      (e) => e.type === 'tool.started',
    );
    assert.deepEqual(
      started.map((e) => [e.data.attempt, e.data.worker_id]),
      [
        [1, 'w-edge'],
        [1, 'w-edge'],
      ],
    );
  });

  it('workers authenticate with a tenant key: a client token is refused the protocol and the registries (403 scope_denied)', async () => {
    const id = (await a.post('/v1/sessions', { start: false })).body.id;
    const minted = await a.post('/v1/client-tokens', {
      session_id: id,
      scopes: ['read', 'message', 'decide', 'results', 'cancel'],
    });
    assert.equal(minted.status, 201, JSON.stringify(minted.body));
    const t = a.as(minted.body.token);
    for (const [method, path, body] of [
      ['POST', '/v1/tool-tasks/claim', { tools: ['edge_claim'] }],
      ['POST', '/v1/tool-tasks/tt_abc/heartbeat', {}],
      ['POST', '/v1/tool-tasks/tt_abc/result', { content: 'x' }],
      ['PUT', '/v1/tools/by_token', worker],
      ['GET', '/v1/tools/edge_defaults', undefined],
      ['DELETE', '/v1/tools/edge_defaults', undefined],
      ['PUT', '/v1/mcp-servers/by_token', { url: 'http://127.0.0.1:9/mcp' }],
      ['GET', '/v1/mcp-servers', undefined],
    ] as const) {
      const res = await t.req(method, path, body);
      assert.equal(res.status, 403, `${method} ${path}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.error.code, 'scope_denied', `${method} ${path}`);
    }
    assert.equal((await a.get('/v1/tools/edge_defaults')).status, 200, 'nothing removed');
  });

  it('a later PUT never changes a session already using the tool; a PATCH of its `tools` copies it anew', async () => {
    assert.equal(
      (await a.req('PUT', '/v1/tools/edge_copy', { ...worker, description: 'first' })).status,
      201,
    );
    const id = (await a.post('/v1/sessions', { tools: ['edge_copy'], start: false })).body.id;
    const replaced = await a.req('PUT', '/v1/tools/edge_copy', {
      ...worker,
      description: 'second',
      input_schema: { type: 'object', properties: { sku: { type: 'string' } } },
    });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    const sent = (i: number) => (h.fake.requests[i]!.tools as any[]).find((x) => x.name === 'edge_copy');
    h.fake.enqueue(text('One.'), text('Two.'));
    await a.post(`/v1/sessions/${id}/messages`, { text: 'one' });
    await a.waitFor(id, (s) => s.status === 'idle' && s.iteration === 1);
    assert.equal(sent(0).description, 'first');
    assert.deepEqual(sent(0).input_schema, worker.input_schema);
    const patched = await a.req('PATCH', `/v1/sessions/${id}`, { tools: ['edge_copy'] });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    await a.post(`/v1/sessions/${id}/messages`, { text: 'two' });
    await a.waitFor(id, (s) => s.status === 'idle' && s.iteration === 2);
    assert.equal(sent(1).description, 'second');
    assert.deepEqual(sent(1).input_schema.properties, { sku: { type: 'string' } });
  });

  it('the address rules of §6.3 hold for an http runner’s url and a tenant MCP server’s: 400 invalid_webhook_url', async () => {
    // WEBHOOK_ALLOW_PRIVATE is not set in this harness.
    for (const url of [
      'http://127.0.0.1:9/x',
      'http://localhost:9/x',
      'http://10.1.2.3/x',
      'http://192.168.0.1/x',
      'http://169.254.169.254/latest',
      'http://[::1]:9/x',
    ]) {
      const tool = await a.req('PUT', '/v1/tools/edge_private', {
        ...worker,
        runner: { type: 'http', url },
      });
      assert.equal(tool.status, 400, `tool ${url}: ${JSON.stringify(tool.body)}`);
      assert.equal(tool.body.error.code, 'invalid_webhook_url', `tool ${url}`);
      const mcp = await a.req('PUT', '/v1/mcp-servers/edge_private', { url });
      assert.equal(mcp.status, 400, `mcp ${url}: ${JSON.stringify(mcp.body)}`);
      assert.equal(mcp.body.error.code, 'invalid_webhook_url', `mcp ${url}`);
    }
    assert.equal((await a.get('/v1/tools/edge_private')).status, 404);
    assert.equal((await a.get('/v1/mcp-servers/edge_private')).status, 404);
  });

  it('no worker within timeout_ms: the is_error result goes under on_tool_error (fail: tool_failed; pause: a review)', async () => {
    assert.equal((await a.req('PUT', '/v1/tools/edge_nobody', { ...worker, timeout_ms: 1000 })).status, 201);
    h.fake.enqueue(toolCalls([toolUse('edge_nobody', { id: 1 }, 'toolu_nb1')]));
    const failing = await a.post('/v1/sessions', {
      input: 'go',
      tools: ['edge_nobody'],
      on_tool_error: 'fail',
    });
    const failed = await a.waitStatus(failing.body.id, ['failed', 'idle'], 20_000);
    assert.equal(failed.status, 'failed', JSON.stringify(failed));
    assert.equal(failed.error.code, 'tool_failed');
    assert.match(failed.error.message, /no worker answered/);

    h.fake.reset();
    h.fake.enqueue(toolCalls([toolUse('edge_nobody', { id: 2 }, 'toolu_nb2')]), text('Noted.'));
    const pausing = await a.post('/v1/sessions', {
      input: 'go',
      tools: ['edge_nobody'],
      on_tool_error: 'pause',
    });
    const paused = await a.waitStatus(pausing.body.id, ['requires_action', 'idle', 'failed'], 20_000);
    assert.equal(paused.status, 'requires_action', JSON.stringify(paused));
    assert.equal(paused.required_action.type, 'review_tool_results');
    const [held] = paused.required_action.tool_results;
    assert.equal(held.tool_use_id, 'toolu_nb2');
    assert.equal(held.is_error, true);
    assert.match(String(held.content), /^Error: no worker answered within 1000 ms/);
  });

  it('review runs after a worker’s result: the session waits with it before the model sees it', async () => {
    assert.equal((await a.req('PUT', '/v1/tools/edge_review', worker)).status, 201);
    h.fake.enqueue(toolCalls([toolUse('edge_review', { id: 3 }, 'toolu_rv')]), text('Reviewed.'));
    const id = (
      await a.post('/v1/sessions', {
        input: 'go',
        tools: ['edge_review'],
        review_tool_results: ['edge_review'],
      })
    ).body.id;
    const claimed = await a.post('/v1/tool-tasks/claim', { tools: ['edge_review'], wait_ms: 10_000 });
    const task = claimed.body.tasks[0];
    assert.ok(task, JSON.stringify(claimed.body));
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'raw answer' })).status, 200);
    const waiting = await a.waitStatus(id, ['requires_action', 'idle', 'failed'], 20_000);
    assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting));
    assert.equal(waiting.required_action.type, 'review_tool_results');
    assert.deepEqual(
      waiting.required_action.tool_results.map((r: any) => [r.tool_use_id, r.content]),
      [['toolu_rv', 'raw answer']],
    );
    assert.equal(h.fake.requests.length, 1, 'the model has not seen the result');
    const replaced = await a.req('PUT', `/v1/sessions/${id}/tool-results/toolu_rv`, {
      content: 'edited answer',
    });
    assert.ok(replaced.status === 200 || replaced.status === 202, JSON.stringify(replaced.body));
    assert.equal((await a.post(`/v1/sessions/${id}/continue`)).status < 300, true);
    await a.waitStatus(id, 'idle', 20_000);
    const sent = (h.fake.requests[1]!.messages.at(-1)!.content as any[]).find(
      (x) => x.type === 'tool_result',
    );
    assert.equal(sent.content, 'edited answer');
  });

  it('Idempotency-Key on the new POSTs (and the PUT of a tool): the same body answers the first answer, another 422', async () => {
    const id = (await a.post('/v1/sessions', { start: false })).body.id;
    const key = (k: string) => ({ 'idempotency-key': k });
    const mint = { session_id: id, scopes: ['read'] };
    const first = await a.req('POST', '/v1/client-tokens', mint, key('edge-mint'));
    assert.equal(first.status, 201, JSON.stringify(first.body));
    const again = await a.req('POST', '/v1/client-tokens', mint, key('edge-mint'));
    assert.equal(again.status, 201);
    assert.equal(again.body.token, first.body.token, 'the first answer, its token included');
    const other = await a.req(
      'POST',
      '/v1/client-tokens',
      { ...mint, scopes: ['message'] },
      key('edge-mint'),
    );
    assert.equal(other.status, 422, JSON.stringify(other.body));
    assert.equal(other.body.error.code, 'idempotency_key_reused');

    const tool = await a.req('PUT', '/v1/tools/edge_keyed', worker, key('edge-put'));
    assert.equal(tool.status, 201, JSON.stringify(tool.body));
    assert.equal((await a.req('PUT', '/v1/tools/edge_keyed', worker, key('edge-put'))).status, 201);
    const toolOther = await a.req(
      'PUT',
      '/v1/tools/edge_keyed',
      // Not the default (3): the key's fingerprint is of the body as the route parsed it, its defaults filled in.
      { ...worker, max_attempts: 5 },
      key('edge-put'),
    );
    assert.equal(toolOther.status, 422, JSON.stringify(toolOther.body));
    assert.equal(toolOther.body.error.code, 'idempotency_key_reused');

    h.fake.enqueue(toolCalls([toolUse('edge_keyed', { id: 4 }, 'toolu_k1')]), text('ok'));
    const sid = (await a.post('/v1/sessions', { input: 'go', tools: ['edge_keyed'] })).body.id;
    const claim = { tools: ['edge_keyed'], wait_ms: 10_000, worker_id: 'w-keyed' };
    const claimed = await a.req('POST', '/v1/tool-tasks/claim', claim, key('edge-claim'));
    assert.equal(claimed.body.tasks.length, 1, JSON.stringify(claimed.body));
    const replayed = await a.req('POST', '/v1/tool-tasks/claim', claim, key('edge-claim'));
    assert.deepEqual(
      replayed.body,
      claimed.body,
      'the lost answer of a claim comes back: its task is not lost',
    );
    const claimOther = await a.req('POST', '/v1/tool-tasks/claim', { ...claim, max: 2 }, key('edge-claim'));
    assert.equal(claimOther.status, 422, JSON.stringify(claimOther.body));
    assert.equal(claimOther.body.error.code, 'idempotency_key_reused');
    const task = claimed.body.tasks[0];
    const result = { content: 'found' };
    const r1 = await a.req('POST', `/v1/tool-tasks/${task.id}/result`, result, key('edge-result'));
    assert.equal(r1.status, 200, JSON.stringify(r1.body));
    const r2 = await a.req('POST', `/v1/tool-tasks/${task.id}/result`, result, key('edge-result'));
    assert.equal(r2.status, 200, `a replay, not task_already_completed: ${JSON.stringify(r2.body)}`);
    const r3 = await a.req(
      'POST',
      `/v1/tool-tasks/${task.id}/result`,
      { content: 'other' },
      key('edge-result'),
    );
    assert.equal(r3.status, 422, JSON.stringify(r3.body));
    assert.equal(r3.body.error.code, 'idempotency_key_reused');
    await a.waitStatus(sid, 'idle', 20_000);
  });

  it('a claimed task whose session is deleted: its heartbeat and result are refused 409 task_cancelled', async () => {
    assert.equal((await a.req('PUT', '/v1/tools/edge_deleted', worker)).status, 201);
    h.fake.enqueue(toolCalls([toolUse('edge_deleted', { id: 5 }, 'toolu_d1')]), text('never'));
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['edge_deleted'] })).body.id;
    const task = (await a.post('/v1/tool-tasks/claim', { tools: ['edge_deleted'], wait_ms: 10_000 })).body
      .tasks[0];
    assert.ok(task);
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    for (const route of ['heartbeat', 'result']) {
      const res = await a.post(
        `/v1/tool-tasks/${task.id}/${route}`,
        route === 'result' ? { content: 'x' } : {},
      );
      assert.equal(res.status, 409, `${route}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.error.code, 'task_cancelled', route);
    }
  });

  it('a decision sent by a client token through POST /v1/chat is recorded `by` its subject', async () => {
    h.fake.enqueue(toolCalls([toolUse('get_weather', { location: 'Paris' }, 'toolu_cw')]), text('Sunny.'));
    const id = (
      await a.post('/v1/sessions', { input: 'weather?', tools: ['get_weather'], approval: 'always' })
    ).body.id;
    await a.waitStatus(id, 'requires_action');
    const minted = await a.post('/v1/client-tokens', {
      session_id: id,
      scopes: ['read', 'decide'],
      subject: 'chat-reviewer',
    });
    assert.equal(minted.status, 201, JSON.stringify(minted.body));
    const answered = await a.as(minted.body.token).post('/v1/chat', {
      id,
      trigger: 'submit-message',
      messages: [
        {
          id: 'a1',
          role: 'assistant',
          parts: [
            {
              type: 'tool-get_weather',
              toolCallId: 'toolu_cw',
              state: 'approval-responded',
              input: { location: 'Paris' },
              approval: { id: 'toolu_cw', approved: true },
            },
          ],
        },
      ],
    });
    assert.equal(answered.status, 200, JSON.stringify(answered.body).slice(0, 300));
    await a.waitStatus(id, 'idle', 20_000);
    const decided = ((await a.get(`/v1/sessions/${id}/events?limit=500`)).body.data as any[]).filter(
      (e) => e.type === 'tool_call.decided',
    );
    assert.deepEqual(
      decided.map((e) => [e.data.tool_use_id, e.data.decision, e.data.by]),
      [['toolu_cw', 'approve', 'chat-reviewer']],
    );
  });

  it('client tokens: ttl_s 86400 is taken, 86401 and 59 are not; the answer has the contract’s fields', async () => {
    const id = (await a.post('/v1/sessions', { start: false })).body.id;
    const longest = await a.post('/v1/client-tokens', { session_id: id, scopes: ['read'], ttl_s: 86_400 });
    assert.equal(longest.status, 201, JSON.stringify(longest.body));
    near(longest.body.expires_at, Date.now() + 86_400_000, 5000, 'expires_at = now + ttl_s');
    for (const field of ['id', 'token', 'session_id', 'scopes', 'expires_at'])
      assert.ok(field in longest.body, field);
    assert.match(longest.body.id, /^ctk_/);
    assert.match(longest.body.token, /^ct_/);
    assert.equal(longest.body.session_id, id);
    assert.deepEqual(longest.body.scopes, ['read']);
    assert.equal((await a.as(longest.body.token).get(`/v1/sessions/${id}`)).status, 200);
    for (const ttl of [59, 86_401, 600.5, '900'])
      invalid(
        await a.post('/v1/client-tokens', { session_id: id, scopes: ['read'], ttl_s: ttl }),
        `ttl_s ${ttl}`,
      );
    // Revoked: 401 unauthorized (not token_expired), at once.
    assert.equal((await a.req('DELETE', `/v1/client-tokens/${longest.body.id}`)).status, 200);
    const after = await a.as(longest.body.token).get(`/v1/sessions/${id}`);
    assert.equal(after.status, 401);
    assert.equal(after.body.error.code, 'unauthorized');
    // Another tenant's token id: 404, as an unknown one.
    const foreign = await a.post('/v1/client-tokens', { session_id: id, scopes: ['read'] });
    const gone = await b.req('DELETE', `/v1/client-tokens/${foreign.body.id}`);
    assert.equal(gone.status, 404);
    assert.equal(gone.body.error.code, 'client_token_not_found');
  });
});

describe(
  'contract §7.1 with private addresses allowed: tenant MCP servers, http runners',
  { timeout: 180_000 },
  () => {
    let h: Harness;
    let operator: TestMcpServer;
    let tenant: TestMcpServer;
    before(async () => {
      [operator, tenant] = await Promise.all([startMcpServer(), startMcpServer()]);
      h = await startHarness({
        env: {
          API_KEYS: 'acme:key-a,globex:key-b',
          MCP_SERVERS: JSON.stringify({ shared: { url: operator.url } }),
          WEBHOOK_ALLOW_PRIVATE: 'true',
        },
      });
    });
    after(async () => {
      await h?.close();
      await Promise.all([operator?.kill(), tenant?.kill()]);
    });

    it('acme’s own "shared" runs acme’s calls; globex, without one, gets the operator’s', async () => {
      const put = await h.api.req('PUT', '/v1/mcp-servers/shared', { url: tenant.url });
      assert.equal(put.status, 201, JSON.stringify(put.body));
      for (const [api, who] of [
        [h.api, 'acme'],
        [h.api.as('key-b'), 'globex'],
      ] as const) {
        h.fake.reset();
        h.fake.enqueue(toolCall('echo', { text: who }, { id: `toolu_${who}` }), text('done'));
        const created = await api.post('/v1/sessions', { input: 'echo', tools: [{ mcp_server: 'shared' }] });
        assert.equal(created.status, 201, `${who}: ${JSON.stringify(created.body)}`);
        const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 30_000);
        assert.equal(done.status, 'idle', `${who}: ${JSON.stringify(done)}`);
      }
      const [ran, ranOperator] = await Promise.all([tenant.calls(), operator.calls()]);
      assert.equal(ran['echo:acme']?.finished, 1, `tenant server: ${JSON.stringify(ran)}`);
      assert.equal(ran['echo:globex'], undefined, `tenant server: ${JSON.stringify(ran)}`);
      assert.equal(
        ranOperator['echo:globex']?.finished,
        1,
        `operator server: ${JSON.stringify(ranOperator)}`,
      );
      assert.equal(ranOperator['echo:acme'], undefined, `operator server: ${JSON.stringify(ranOperator)}`);
    });
    it('an http runner: its secret shown when made (a worker tool turned http too), the body and signature of §7.1, is_error taken', async () => {
      const seen: Array<{ raw: string; headers: http.IncomingHttpHeaders }> = [];
      const receiver = http.createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          seen.push({ raw: Buffer.concat(chunks).toString('utf8'), headers: req.headers });
          res
            .writeHead(200, { 'content-type': 'application/json' })
            .end(JSON.stringify({ content: 'out of stock', is_error: true }));
        });
      });
      await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
      try {
        const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/tool`;
        const def = { description: 'Stock.', input_schema: { type: 'object' } };
        assert.equal(
          (await h.api.req('PUT', '/v1/tools/edge_http', { ...def, runner: { type: 'worker' } })).status,
          201,
        );
        const turned = await h.api.req('PUT', '/v1/tools/edge_http', {
          ...def,
          runner: { type: 'http', url },
        });
        assert.equal(turned.status, 200, JSON.stringify(turned.body));
        assert.match(turned.body.secret, /^whsec_/, 'an http runner made by a replace shows its secret');
        assert.deepEqual(turned.body.runner, { type: 'http', url });
        const kept = await h.api.req('PUT', '/v1/tools/edge_http', { ...def, runner: { type: 'http', url } });
        assert.equal(kept.status, 200);
        assert.ok(!('secret' in kept.body), 'once');
        assert.ok(!('secret' in (await h.api.get('/v1/tools/edge_http')).body), 'once');
        const listed = ((await h.api.get('/v1/tools')).body.data as any[]).find(
          (t) => t.name === 'edge_http',
        );
        assert.deepEqual(listed.runner, { type: 'http', url });
        assert.ok(!('secret' in listed));

        h.fake.reset();
        h.fake.enqueue(toolCalls([toolUse('edge_http', { sku: 'A1' }, 'toolu_h1')]), text('Sorry.'));
        const id = (await h.api.post('/v1/sessions', { input: 'stock?', tools: ['edge_http'] })).body.id;
        await h.api.waitStatus(id, 'idle', 30_000);
        assert.equal(seen.length, 1);
        const [call] = seen;
        const body = JSON.parse(call!.raw);
        assert.deepEqual(Object.keys(body).sort(), [
          'attempt',
          'id',
          'idempotency_key',
          'input',
          'name',
          'session_id',
          'tool_use_id',
        ]);
        assert.match(body.id, /^tt_/);
        assert.equal(body.session_id, id);
        assert.equal(body.tool_use_id, 'toolu_h1');
        assert.equal(body.name, 'edge_http');
        assert.deepEqual(body.input, { sku: 'A1' });
        assert.equal(body.attempt, 1);
        assert.equal(body.idempotency_key, `${id}:toolu_h1`);
        assert.match(String(call!.headers['webhook-signature']), /^v1,[A-Za-z0-9+/=]+$/);
        new Webhook(turned.body.secret).verify(call!.raw, {
          'webhook-id': String(call!.headers['webhook-id']),
          'webhook-timestamp': String(call!.headers['webhook-timestamp']),
          'webhook-signature': String(call!.headers['webhook-signature']),
        });
        const sent = (h.fake.requests[1]!.messages.at(-1)!.content as any[]).find(
          (b) => b.type === 'tool_result',
        );
        assert.equal(sent.is_error, true);
        assert.equal(typeof sent.content === 'string' ? sent.content : sent.content[0].text, 'out of stock');
      } finally {
        receiver.closeAllConnections();
        await new Promise<void>((r) => receiver.close(() => r()));
      }
    });
  },
);
