import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { snapshotDiff, snapshotRedis } from '../helpers/redis-snapshot.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { routes, templates, UNFUZZED } from '../security/fuzz-lib.js';

const BODY_LIMIT = 65_536;
const big = 'x'.repeat(BODY_LIMIT + 1000);
const lookup = { name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } };

/** One request that must be refused: `status` and `code` of the error envelope; the test Redis must not change. */
interface Case {
  name: string;
  method: string;
  path: string;
  /** An object is sent as JSON; a string is sent as is (with content-type application/json unless overridden). */
  body?: unknown;
  headers?: Record<string, string>;
  status: number;
  code: string;
}

const u = (content: unknown) => ({ role: 'user', content });
const a = (content: unknown) => ({ role: 'assistant', content });
const use = (id: string, name = 'calculate_sum', input: unknown = { a: 1, b: 2 }) => ({
  type: 'tool_use',
  id,
  name,
  input,
});
const result = (id: string, content: unknown = '3') => ({ type: 'tool_result', tool_use_id: id, content });

describe('invalid requests are refused with a stable code and leave Redis unchanged', () => {
  let h: Harness;
  /** idle, 2 iterations */
  let IDLE: string;
  /** requires_action: client call toolu_w1 waits, server call toolu_w2 answered */
  let WAIT: string;
  /** idle, created with start: false, no iteration */
  let NEW: string;

  before(async () => {
    h = await startHarness({ env: { BODY_LIMIT: String(BODY_LIMIT) } });
    h.fake.enqueue(toolCall('calculate_sum', { a: 1, b: 2 }), text('Idle now.'));
    const idle = await h.api.post('/v1/sessions', { input: 'idle one', tools: ['calculate_sum'] });
    assert.equal(idle.status, 201, JSON.stringify(idle.body));
    IDLE = idle.body.id;
    assert.equal((await h.api.waitStatus(IDLE, ['idle', 'failed'])).status, 'idle');
    h.fake.enqueue(
      toolCalls([
        toolUse('lookup', { q: 'x' }, 'toolu_w1'),
        toolUse('calculate_sum', { a: 1, b: 1 }, 'toolu_w2'),
      ]),
    );
    const wait = await h.api.post('/v1/sessions', { input: 'waiting one', tools: [lookup, 'calculate_sum'] });
    WAIT = wait.body.id;
    assert.equal(
      (await h.api.waitStatus(WAIT, ['requires_action', 'idle', 'failed'])).status,
      'requires_action',
    );
    const fresh = await h.api.post('/v1/sessions', { input: 'not started', start: false });
    NEW = fresh.body.id;
    assert.equal(fresh.body.status, 'idle');
  });
  after(async () => h?.close());

  /** Runs the cases; every mismatch (status, code, or a Redis change) is collected, then reported together. */
  async function check(cases: Case[]): Promise<void> {
    const baseline = await snapshotRedis(h.redis.url, h.service.app.engine);
    const problems: string[] = [];
    for (const c of cases) {
      const r = await h.api.req(c.method, c.path, c.body, c.headers ?? {});
      const code = r.body?.error?.code;
      if (r.status !== c.status || code !== c.code) {
        problems.push(
          `${c.name} (${c.method} ${c.path}): got ${r.status} ${code ?? JSON.stringify(r.body).slice(0, 200)}, ` +
            `want ${c.status} ${c.code}`,
        );
      }
      if (typeof r.body?.error?.message !== 'string' && r.status >= 400) {
        problems.push(`${c.name}: no error.message in ${JSON.stringify(r.body).slice(0, 200)}`);
      }
      const diff = snapshotDiff(baseline, await snapshotRedis(h.redis.url, h.service.app.engine));
      if (diff.length) {
        problems.push(`${c.name}: Redis changed: ${diff.join(', ')}`);
        break; // later cases would all report the same change
      }
    }
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  }

  const bad = (
    name: string,
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ) => ({
    name,
    method,
    path,
    body,
    ...(headers ? { headers } : {}),
    status: 400,
    code: 'invalid_request',
  });

  it('POST /v1/sessions', async () => {
    const P = '/v1/sessions';
    const history = (name: string, messages: unknown[]): Case => ({
      name,
      method: 'POST',
      path: P,
      body: { messages, tools: ['calculate_sum'] },
      status: 400,
      code: 'invalid_history',
    });
    const tool = (name: string, t: unknown, code = 'invalid_request'): Case => ({
      name,
      method: 'POST',
      path: P,
      body: { input: 'x', tools: [t] },
      status: 400,
      code,
    });
    await check([
      bad('max_tokens of the wrong type', 'POST', P, { input: 'x', max_tokens: 'lots' }),
      bad('tools not an array', 'POST', P, { input: 'x', tools: 'calculate_sum' }),
      bad('an unknown field', 'POST', P, { input: 'x', inptu: 'typo' }),
      bad('input a number', 'POST', P, { input: 5 }),
      bad('input empty', 'POST', P, { input: '' }),
      bad('input and messages', 'POST', P, { input: 'x', messages: [u('y')] }),
      bad('model empty', 'POST', P, { input: 'x', model: '' }),
      bad('system a number', 'POST', P, { input: 'x', system: 5 }),
      bad('params.messages', 'POST', P, { input: 'x', params: { messages: [] } }),
      bad('params.stream', 'POST', P, { input: 'x', params: { stream: true } }),
      bad('params.temperature out of range', 'POST', P, { input: 'x', params: { temperature: 3 } }),
      bad('params.max_tokens negative', 'POST', P, { input: 'x', params: { model: 'm', max_tokens: -1 } }),
      bad('max_iterations 0', 'POST', P, { input: 'x', max_iterations: 0 }),
      bad('max_iterations a string', 'POST', P, { input: 'x', max_iterations: 'ten' }),
      bad('approval unknown', 'POST', P, { input: 'x', approval: 'sometimes' }),
      bad('review_tool_results a number', 'POST', P, { input: 'x', review_tool_results: 1 }),
      bad('on_tool_error unknown', 'POST', P, { input: 'x', on_tool_error: 'explode' }),
      bad('on_max_tokens unknown', 'POST', P, {
        input: 'x',
        on_max_tokens: { retry: 'triple', ceiling: 10 },
      }),
      bad('metadata value an object', 'POST', P, { input: 'x', metadata: { k: { deep: 1 } } }),
      bad('metadata with 33 keys', 'POST', P, {
        input: 'x',
        metadata: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, i])),
      }),
      bad('start without messages or input', 'POST', P, { tools: ['calculate_sum'] }),
      bad('an array body', 'POST', P, []),
      bad('a null body', 'POST', P, 'null'),
      bad('a message with role system', 'POST', P, { messages: [{ role: 'system', content: 'x' }] }),
      bad('a text block with an unknown field', 'POST', P, {
        messages: [u([{ type: 'text', text: 'x', colour: 'red' }])],
      }),
      bad('a text block without text', 'POST', P, { messages: [u([{ type: 'text' }])] }),
      bad('empty content', 'POST', P, { messages: [u([])] }),
      bad('an unknown block type', 'POST', P, { messages: [u([{ type: 'video', url: 'x' }])] }),
      bad('an image with a bad media type', 'POST', P, {
        messages: [u([{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'AA==' } }])],
      }),
      bad('tool_use input an array', 'POST', P, {
        messages: [u('x'), a([use('toolu_1', 'calculate_sum', [1])])],
      }),
      bad('tool_use in a user turn', 'POST', P, { messages: [u([use('toolu_1')])] }),
      bad('tool_result in an assistant turn', 'POST', P, { messages: [u('x'), a([result('toolu_1')])] }),
      // Consecutive turns of one role are accepted (the API combines them; GET …/messages answers such histories).
      history('a user turn answering the calls of an assistant turn three messages back', [
        u('a'),
        a([use('toolu_x')]),
        u([result('toolu_x')]),
        a('b'),
        a('c'),
        u([result('toolu_x')]),
      ]),
      history('first message from the assistant', [a('hi')]),
      history('a tool_result answering nothing', [u('a'), a('b'), u([result('toolu_nothing')])]),
      history('a tool_result answering a call two turns back', [
        u('a'),
        a([use('toolu_old')]),
        u([result('toolu_old')]),
        a('b'),
        u([result('toolu_old')]),
      ]),
      history('a tool_use left unanswered', [
        u('a'),
        a([use('toolu_1'), use('toolu_2')]),
        u([result('toolu_1')]),
      ]),
      history('a tool_use answered twice', [
        u('a'),
        a([use('toolu_1')]),
        u([result('toolu_1'), result('toolu_1')]),
      ]),
      history('a tool_use id used twice', [
        u('a'),
        a([use('toolu_1')]),
        u([result('toolu_1')]),
        a([use('toolu_1')]),
        u([result('toolu_1')]),
      ]),
      history('text before a tool_result', [
        u('a'),
        a([use('toolu_1')]),
        u([{ type: 'text', text: 'hm' }, result('toolu_1')]),
      ]),
      tool('an unknown server tool', 'calculate_product', 'unknown_tool'),
      tool('a client tool with a string schema', { name: 'lookup', input_schema: { type: 'string' } }),
      tool('a client tool with an array schema', { name: 'lookup', input_schema: [] }),
      tool('a client tool without a schema', { name: 'lookup', description: 'x' }),
      tool('a client tool whose properties is not an object', {
        name: 'lookup',
        input_schema: { type: 'object', properties: 'q' },
      }),
      tool('a client tool whose property schema is a number', {
        name: 'lookup',
        input_schema: { type: 'object', properties: { q: 42 } },
      }),
      tool('a client tool whose required is not a list', {
        name: 'lookup',
        input_schema: { type: 'object', properties: {}, required: 'q' },
      }),
      tool('a client tool with a bad name', { name: 'look up!', input_schema: { type: 'object' } }),
      tool('a client tool with an unknown field', {
        name: 'lookup',
        input_schema: { type: 'object' },
        run: 'x',
      }),
      tool(
        'a client tool named like a server tool',
        { name: 'get_weather', input_schema: { type: 'object' } },
        'tool_name_conflict',
      ),
      {
        name: 'the same tool twice',
        method: 'POST',
        path: P,
        body: { input: 'x', tools: ['calculate_sum', 'calculate_sum'] },
        status: 400,
        code: 'duplicate_tool',
      },
      {
        name: 'malformed JSON',
        method: 'POST',
        path: P,
        body: '{"input": ',
        status: 400,
        code: 'invalid_json',
      },
      // An empty JSON body reads as no body (src/app.ts); a session needs one.
      bad('an empty JSON body', 'POST', P, ''),
      // JSON only (src/app.ts removes Fastify's text/plain parser): a text body is 415 as any other type.
      {
        name: 'a text/plain body',
        method: 'POST',
        path: P,
        body: 'input=x',
        headers: { 'content-type': 'text/plain' },
        status: 415,
        code: 'unsupported_media_type',
      },
      {
        name: 'an XML body',
        method: 'POST',
        path: P,
        body: '<input>x</input>',
        headers: { 'content-type': 'application/xml' },
        status: 415,
        code: 'unsupported_media_type',
      },
      {
        name: 'a body over the limit',
        method: 'POST',
        path: P,
        body: { input: big },
        status: 413,
        code: 'payload_too_large',
      },
      bad(
        'an invalid Idempotency-Key',
        'POST',
        P,
        { input: 'x', start: false },
        { 'idempotency-key': 'k'.repeat(300) },
      ),
    ]);
  });

  it('GET /v1/sessions (list) and GET/DELETE /v1/sessions/:id', async () => {
    const nobody = 'ses_AAAAAAAAAAAAAAAA';
    await check([
      bad('limit 0', 'GET', '/v1/sessions?limit=0'),
      bad('limit 101', 'GET', '/v1/sessions?limit=101'),
      bad('limit not a number', 'GET', '/v1/sessions?limit=abc'),
      bad('limit fractional', 'GET', '/v1/sessions?limit=1.5'),
      bad('status unknown', 'GET', '/v1/sessions?status=done'),
      bad('an unknown query parameter', 'GET', '/v1/sessions?limt=5'),
      // Names that an object's prototype has: no parameters of the list either.
      bad('?constructor', 'GET', '/v1/sessions?constructor=x'),
      bad('?toString', 'GET', '/v1/sessions?toString=1'),
      bad('?hasOwnProperty', 'GET', '/v1/sessions?hasOwnProperty=1&limit=1'),
      bad('cursor too long', 'GET', `/v1/sessions?cursor=${'c'.repeat(201)}`),
      {
        name: 'a made-up cursor',
        method: 'GET',
        path: '/v1/sessions?cursor=abc',
        status: 400,
        code: 'invalid_cursor',
      },
      bad('GET a malformed id', 'GET', '/v1/sessions/no%20pe'),
      bad('GET an id with a brace (a hash tag in a key)', 'GET', '/v1/sessions/ses_AAAA%7BAAAA%7D'),
      bad('GET an id over 128 characters', 'GET', `/v1/sessions/ses_${'A'.repeat(125)}`),
      {
        name: 'GET a made-up id of another shape',
        method: 'GET',
        path: '/v1/sessions/ses_missing',
        status: 404,
        code: 'session_not_found',
      },
      {
        name: 'GET an unknown id',
        method: 'GET',
        path: `/v1/sessions/${nobody}`,
        status: 404,
        code: 'session_not_found',
      },
      bad('DELETE a malformed id', 'DELETE', '/v1/sessions/no%20pe'),
      // A DELETE takes no body: one sent anyway is refused (the session is kept), not ignored.
      bad('DELETE with a body', 'DELETE', `/v1/sessions/${IDLE}`, { x: 1 }),
      bad('DELETE of a webhook with a body', 'DELETE', '/v1/webhooks/wh_none', ['x']),
      {
        name: 'DELETE an unknown id',
        method: 'DELETE',
        path: `/v1/sessions/${nobody}`,
        status: 404,
        code: 'session_not_found',
      },
      bad('messages of a malformed id', 'GET', '/v1/sessions/no%20pe/messages'),
      {
        name: 'an unknown route',
        method: 'GET',
        path: `/v1/sessions/${IDLE}/bogus`,
        status: 404,
        code: 'route_not_found',
      },
    ]);
  });

  it('GET /v1/sessions/:id/iterations[/:n]', async () => {
    const P = `/v1/sessions/${IDLE}/iterations`;
    await check([
      bad('n = 0', 'GET', `${P}/0`),
      bad('n negative', 'GET', `${P}/-1`),
      bad('n not a number', 'GET', `${P}/one`),
      bad('n fractional', 'GET', `${P}/1.5`),
      bad('iterations of a malformed id', 'GET', '/v1/sessions/no%20pe/iterations'),
      { name: 'n past the last', method: 'GET', path: `${P}/3`, status: 404, code: 'iteration_not_found' },
      {
        name: 'n of a session without iterations',
        method: 'GET',
        path: `/v1/sessions/${NEW}/iterations/1`,
        status: 404,
        code: 'iteration_not_found',
      },
    ]);
  });

  it('POST /v1/sessions/:id/messages', async () => {
    const P = `/v1/sessions/${IDLE}/messages`;
    await check([
      bad('an empty body', 'POST', P, {}),
      bad('text a number', 'POST', P, { text: 5 }),
      bad('text empty', 'POST', P, { text: '' }),
      bad('text and content', 'POST', P, { text: 'x', content: 'y' }),
      bad('an unknown field', 'POST', P, { text: 'x', urgent: true }),
      bad('content empty', 'POST', P, { content: [] }),
      bad('content with a tool_result', 'POST', P, { content: [result('toolu_1')] }),
      bad('content with a block without text', 'POST', P, { content: [{ type: 'text' }] }),
      bad('role assistant', 'POST', P, { role: 'assistant', text: 'x' }),
      bad('interrupt not a boolean', 'POST', P, { text: 'x', interrupt: 'yes' }),
      bad('a malformed id', 'POST', '/v1/sessions/no%20pe/messages', { text: 'x' }),
      // Unquoted text is no entity tag (400); a quoted one that is no revision (`"abc"`) never matches (412).
      bad('a malformed If-Match', 'POST', P, { text: 'x' }, { 'if-match': 'abc' }),
      {
        name: 'malformed JSON',
        method: 'POST',
        path: P,
        body: '{"text": "x"',
        status: 400,
        code: 'invalid_json',
      },
      {
        name: 'a body over the limit',
        method: 'POST',
        path: P,
        body: { text: big },
        status: 413,
        code: 'payload_too_large',
      },
      {
        name: 'a stale If-Match',
        method: 'POST',
        path: P,
        body: { text: 'x' },
        headers: { 'if-match': '"9999"' },
        status: 412,
        code: 'revision_mismatch',
      },
      {
        name: 'an unknown session',
        method: 'POST',
        path: '/v1/sessions/ses_AAAAAAAAAAAAAAAA/messages',
        body: { text: 'x' },
        status: 404,
        code: 'session_not_found',
      },
    ]);
  });

  it('POST /v1/sessions/:id/tool-calls/:tool_use_id', async () => {
    const P = `/v1/sessions/${WAIT}/tool-calls/toolu_w1`;
    await check([
      bad('an empty body', 'POST', P, {}),
      bad('decision unknown', 'POST', P, { decision: 'maybe' }),
      bad('input not an object', 'POST', P, { decision: 'approve', input: 'x' }),
      bad('reason a number', 'POST', P, { decision: 'deny', reason: 5 }),
      bad('an unknown field', 'POST', P, { decision: 'approve', why: 'x' }),
      {
        name: 'a decision while no call awaits approval',
        method: 'POST',
        path: P,
        body: { decision: 'approve' },
        status: 409,
        code: 'nothing_awaits_approval',
      },
      {
        name: 'a decision on an idle session',
        method: 'POST',
        path: `/v1/sessions/${IDLE}/tool-calls/toolu_x`,
        body: { decision: 'deny' },
        status: 409,
        code: 'nothing_awaits_approval',
      },
    ]);
  });

  it('PUT /v1/sessions/:id/tool-results/:tool_use_id and POST /v1/sessions/:id/tool-results', async () => {
    const P = `/v1/sessions/${WAIT}/tool-results/toolu_w1`;
    const M = `/v1/sessions/${WAIT}/tool-results`;
    await check([
      bad('PUT an empty body', 'PUT', P, {}),
      bad('PUT content a number', 'PUT', P, { content: 5 }),
      bad('PUT is_error a string', 'PUT', P, { content: 'x', is_error: 'yes' }),
      bad('PUT an unknown field', 'PUT', P, { content: 'x', tool_use_id: 'toolu_w1' }),
      bad('PUT an unknown block type', 'PUT', P, { content: [{ type: 'bogus' }] }),
      bad('PUT a nested tool_result', 'PUT', P, { content: [result('toolu_w1')] }),
      { name: 'PUT malformed JSON', method: 'PUT', path: P, body: '{', status: 400, code: 'invalid_json' },
      {
        name: 'PUT over the limit',
        method: 'PUT',
        path: P,
        body: { content: big },
        status: 413,
        code: 'payload_too_large',
      },
      {
        name: 'PUT an unknown tool_use_id',
        method: 'PUT',
        path: `${M}/toolu_unknown`,
        body: { content: 'x' },
        status: 409,
        code: 'unknown_tool_use_id',
      },
      {
        name: 'PUT on an idle session',
        method: 'PUT',
        path: `/v1/sessions/${IDLE}/tool-results/toolu_x`,
        body: { content: 'x' },
        status: 409,
        code: 'nothing_awaits_results',
      },
      bad('POST an empty body', 'POST', M, {}),
      bad('POST results empty', 'POST', M, { results: [] }),
      bad('POST results not a list', 'POST', M, { results: 'x' }),
      bad('POST a result without tool_use_id', 'POST', M, { results: [{ content: 'x' }] }),
      bad('POST a result with an empty tool_use_id', 'POST', M, {
        results: [{ tool_use_id: '', content: 'x' }],
      }),
      bad('POST a result with an unknown field', 'POST', M, {
        results: [{ tool_use_id: 'toolu_w1', content: 'x', extra: 1 }],
      }),
      bad('POST continue not a boolean', 'POST', M, {
        results: [{ tool_use_id: 'toolu_w1', content: 'x' }],
        continue: 'y',
      }),
      bad('POST 257 results', 'POST', M, {
        results: Array.from({ length: 257 }, (_, i) => ({ tool_use_id: `toolu_${i}`, content: 'x' })),
      }),
    ]);
  });

  it('continue, cancel, resume, retry', async () => {
    const on = (id: string, what: string) => `/v1/sessions/${id}/${what}`;
    await check([
      bad('continue with an unknown field', 'POST', on(WAIT, 'continue'), { go: true }),
      bad('cancel with an unknown field', 'POST', on(IDLE, 'cancel'), { force: true }),
      bad('resume with an unknown field', 'POST', on(IDLE, 'resume'), { now: true }),
      bad('continue with an array body', 'POST', on(WAIT, 'continue'), []),
      bad('retry with params a string', 'POST', on(IDLE, 'retry'), { params: 'x' }),
      bad('retry with an unknown field', 'POST', on(IDLE, 'retry'), { turns: 2 }),
      bad('retry with params.max_tokens 0', 'POST', on(IDLE, 'retry'), { params: { max_tokens: 0 } }),
      bad('retry with params.tools', 'POST', on(IDLE, 'retry'), { params: { tools: [] } }),
      ...stateConflicts({}),
    ]);
  });

  /** Valid bodies at the wrong time: 409 with a code. `body` undefined sends no body at all. */
  const stateConflicts = (body: unknown): Case[] => {
    const on = (id: string, what: string) => `/v1/sessions/${id}/${what}`;
    const c = (name: string, path: string, code: string): Case => ({
      name: `${name}${body === undefined ? ' (no body)' : ''}`,
      method: 'POST',
      path,
      body,
      status: 409,
      code,
    });
    return [
      c('continue when idle', on(IDLE, 'continue'), 'nothing_to_continue'),
      c('continue with a client result missing', on(WAIT, 'continue'), 'tool_calls_undecided'),
      c('cancel when idle', on(IDLE, 'cancel'), 'session_not_running'),
      c('resume when idle', on(IDLE, 'resume'), 'session_not_failed'),
      c('resume when waiting', on(WAIT, 'resume'), 'session_not_failed'),
      c('retry with nothing to retry', on(NEW, 'retry'), 'nothing_to_retry'),
    ];
  };

  it('continue, cancel, resume and retry take no body at all (their body is optional)', async () => {
    await check(stateConflicts(undefined));
  });

  it('tool_use_id path params: up to 128 characters are routed, longer ones get the error envelope', async () => {
    const long = `toolu_${'x'.repeat(104)}`; // 110 characters: a valid id by the route's own schema (max 128)
    await check([
      {
        name: 'PUT a result for an unknown 110-character id',
        method: 'PUT',
        path: `/v1/sessions/${WAIT}/tool-results/${long}`,
        body: { content: 'x' },
        status: 409,
        code: 'unknown_tool_use_id',
      },
      bad('tool_use_id of 129 characters', 'POST', `/v1/sessions/${WAIT}/tool-calls/${'t'.repeat(129)}`, {
        decision: 'approve',
      }),
    ]);
  });

  it('PATCH /v1/sessions/:id', async () => {
    const P = `/v1/sessions/${IDLE}`;
    await check([
      bad('nothing to change', 'PATCH', P, {}),
      bad('max_iterations 0', 'PATCH', P, { max_iterations: 0 }),
      bad('max_iterations a string', 'PATCH', P, { max_iterations: '5' }),
      bad('params.messages', 'PATCH', P, { params: { messages: [] } }),
      bad('params a string', 'PATCH', P, { params: 'x' }),
      bad('params.max_tokens negative', 'PATCH', P, { params: { max_tokens: -1 } }),
      bad('params.model removed', 'PATCH', P, { params: { model: null } }),
      bad('params.temperature a string', 'PATCH', P, { params: { temperature: 'hot' } }),
      bad('approval a number', 'PATCH', P, { approval: 5 }),
      bad('on_tool_error unknown', 'PATCH', P, { on_tool_error: 'explode' }),
      bad('metadata value an object', 'PATCH', P, { metadata: { k: {} } }),
      bad('an unknown field', 'PATCH', P, { status: 'idle' }),
      bad('tools with an unknown entry form', 'PATCH', P, { tools: [{ name: 'x' }] }),
      bad('tools not a list', 'PATCH', P, { tools: 'get_weather' }),
      bad('a malformed If-Match', 'PATCH', P, { max_iterations: 3 }, { 'if-match': 'seventeen' }),
      {
        name: 'a stale If-Match',
        method: 'PATCH',
        path: P,
        body: { max_iterations: 3 },
        headers: { 'if-match': '"1"' },
        status: 412,
        code: 'revision_mismatch',
      },
    ]);
  });

  it('every /v1 route refuses a query parameter it does not take, before anything else is done', async () => {
    // Every /v1 operation (the fuzzer's list, which test/security/fuzz.test.ts holds to openapi.json) with a valid
    // body and path, so the query is what is refused: the body and the path are checked before it.
    const ops = [...routes, ...UNFUZZED.map((r) => [...r.split(' '), null] as [string, string, null])].filter(
      ([method, template]) => method !== 'OPTIONS' && template.startsWith('/v1/'),
    );
    const ids: Record<string, string> = { sessions: IDLE, webhooks: 'wh_x1', 'tool-tasks': 'tt_x1' };
    const baseline = await snapshotRedis(h.redis.url, h.service.app.engine);
    const problems: string[] = [];
    for (const [method, template, kind] of ops) {
      const path = template
        .replace(':id', ids[template.split('/')[2]!] ?? 'x1')
        .replace(':tool_use_id', 'toolu_1')
        .replace(':name', 'tool_1')
        .replace(':path', 'notes/a.md')
        .replace(':n', '1');
      for (const query of ['?bogus=1', '?limit=1&bogus=2', '?__proto__=bogus']) {
        const r = await h.api.req(method, path + query, kind ? templates[kind] : undefined);
        const error = r.body?.error;
        if (
          r.status !== 400 ||
          error?.code !== 'invalid_request' ||
          error.message !== 'Invalid request querystring.' ||
          !/bogus|__proto__/.test(JSON.stringify(error.details)) ||
          // One shape on every route (docs/API.md): the query's root, `unrecognized_keys`.
          !error.details.every(
            (d: { path: string; code: string }) => d.path === '/' && d.code === 'unrecognized_keys',
          )
        )
          problems.push(`${method} ${path}${query}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
      }
    }
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
    assert.deepEqual(snapshotDiff(baseline, await snapshotRedis(h.redis.url, h.service.app.engine)), []);
  });

  it('POST /v1/sessions/:id/fork', async () => {
    const P = `/v1/sessions/${IDLE}/fork`;
    await check([
      bad('no at_iteration', 'POST', P, {}),
      bad('at_iteration negative', 'POST', P, { at_iteration: -1 }),
      bad('at_iteration a string', 'POST', P, { at_iteration: '1' }),
      bad('at_iteration fractional', 'POST', P, { at_iteration: 1.5 }),
      bad('an unknown field', 'POST', P, { at_iteration: 1, deep: true }),
      bad('metadata value a list', 'POST', P, { at_iteration: 1, metadata: { k: [] } }),
      {
        name: 'at_iteration past the last',
        method: 'POST',
        path: P,
        body: { at_iteration: 3 },
        status: 404, // as GET …/iterations/:n (src/sessions/service.ts fork)
        code: 'iteration_not_found',
      },
    ]);
  });
});
