import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { checkHistory } from '../../src/history.js';
import { clientTool } from '../../src/schemas.js';
import { loadConfig, ConfigError } from '../../src/config.js';
import { needsApproval, needsReview, pendingCalls } from '../../src/engine/policy.js';
import { ThreadDigest } from '../../src/engine/thread-anchor.js';
import { createHash } from 'node:crypto';
import { serverTools } from '../../tools/index.js';
import type { ServerTool } from '../../tools/types.js';

const use = (id: string) => ({ type: 'tool_use', id, name: 'calculate_sum', input: {} });
const res = (id: string) => ({ type: 'tool_result', tool_use_id: id, content: 'x' });

describe('history rules', () => {
  it('accepts a valid tool loop, with or without a trailing assistant turn', () => {
    const h: any[] = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [use('a'), use('b')] },
      { role: 'user', content: [res('a'), res('b'), { type: 'text', text: 'more' }] },
      { role: 'assistant', content: 'done' },
    ];
    assert.deepEqual(checkHistory(h), []);
    assert.deepEqual(checkHistory(h.slice(0, 2)), []);
  });

  it('combines consecutive turns of one role and skips tool-change system messages, as the API does', () => {
    const h: any[] = [
      { role: 'user', content: 'a' },
      { role: 'user', content: 'b' },
      { role: 'assistant', content: [use('a')] },
      { role: 'system', content: [{ type: 'tool_removal', tool: { type: 'tool_reference', name: 'x' } }] },
      { role: 'user', content: [res('a')] },
      { role: 'user', content: 'more' },
    ];
    assert.deepEqual(checkHistory(h), []);
    const summary: any = {
      role: 'assistant',
      content: [{ type: 'compaction', content: 's', signature: 'x' }],
    };
    assert.deepEqual(checkHistory([summary, { role: 'user', content: 'go on' }]), []);
  });

  it('names each broken rule', () => {
    const cases: Array<[any[], RegExp]> = [
      [[{ role: 'assistant', content: 'x' }], /first message must be a user/],
      [
        [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: [use('a')] },
          { role: 'user', content: 'no results' },
        ],
        /tool_use a .* not answered/,
      ],
      [
        [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: 'no calls' },
          { role: 'user', content: [res('zz')] },
        ],
        /answers no tool_use/,
      ],
      [
        [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: [use('a')] },
          { role: 'user', content: [{ type: 'text', text: 't' }, res('a')] },
        ],
        /must come before other content/,
      ],
      [
        [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: [use('a')] },
          { role: 'user', content: [res('a')] },
          { role: 'assistant', content: [use('a')] },
        ],
        /used twice/,
      ],
    ];
    for (const [h, re] of cases) {
      const problems = checkHistory(h);
      assert.ok(
        problems.some((p) => re.test(p.message)),
        `${re}: ${JSON.stringify(problems)}`,
      );
    }
  });
});

describe('client tool schemas', () => {
  it('accepts valid object schemas and rejects invalid ones', () => {
    const ok = {
      name: 'lookup',
      input_schema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
    };
    assert.equal(clientTool.safeParse(ok).success, true);
    for (const input_schema of [
      { type: 'array' },
      { type: 'object', properties: { q: { type: 'strin' } } },
      { type: 'object', required: 'q' },
      { properties: {} },
    ]) {
      assert.equal(
        clientTool.safeParse({ name: 'lookup', input_schema }).success,
        false,
        JSON.stringify(input_schema),
      );
    }
    assert.equal(
      clientTool.safeParse({ name: 'bad name!', input_schema: { type: 'object' } }).success,
      false,
    );
  });
});

describe('policies', () => {
  const sensitive: ServerTool = { ...serverTools.get('calculate_sum')!, requiresApproval: true };
  const plain = serverTools.get('get_weather')!;
  it('approval: "default" follows each tool, lists and always/never override', () => {
    assert.equal(needsApproval({ approval: 'default' }, 'x', sensitive), true);
    assert.equal(needsApproval({ approval: 'default' }, 'get_weather', plain), false);
    assert.equal(needsApproval({ approval: 'never' }, 'x', sensitive), false);
    assert.equal(needsApproval({ approval: 'always' }, 'get_weather', plain), true);
    assert.equal(needsApproval({ approval: ['get_weather'] }, 'get_weather', plain), true);
    assert.equal(
      needsApproval({ approval: 'always' }, 'client_tool', undefined),
      false,
      'client tools are never approved',
    );
  });
  it('review and pending calls', () => {
    assert.equal(needsReview({ review: ['a'] }, [{ name: 'b' }]), false);
    assert.equal(needsReview({ review: ['a'] }, [{ name: 'b' }, { name: 'a' }]), true);
    const pending = pendingCalls(
      {
        tools: ['get_weather', { name: 'lookup', input_schema: { type: 'object' } }],
        approval: ['get_weather'],
        tenant: 'default',
      },
      [
        { id: '1', name: 'get_weather', input: {} },
        { id: '2', name: 'lookup', input: {} },
        { id: '3', name: 'unknown', input: {} },
      ],
      serverTools,
    );
    assert.deepEqual(
      pending.map((c) => [c.kind, c.approval]),
      [
        ['server', 'required'],
        ['client', 'auto'],
        ['server', 'auto'],
      ],
    );
  });
});

describe('config', () => {
  it('names the variable of a bad value', () => {
    assert.throws(
      () => loadConfig({ PORT: 'eighty' }),
      (e: Error) => e instanceof ConfigError && /PORT/.test(e.message),
    );
    assert.throws(() => loadConfig({ API_KEYS: 'nocolon' }), /API_KEYS/);
    assert.throws(() => loadConfig({ REDIS_URL: 'http://x' }), /REDIS_URL: a redis:\/\/ or rediss:\/\/ URL/);
    assert.throws(() => loadConfig({ HOST: '0.0.0.0' }), /API_KEYS: required/);
    const c = loadConfig({ HOST: '0.0.0.0', API_KEYS: 'a:k1,b:k2' });
    assert.equal(c.API_KEYS?.get('k2'), 'b');
    assert.equal(loadConfig({}).PORT, 3000);
  });

  it('TOOL_TASKS_MAX_PER_TENANT is at most 1000: a claim looks at every queued call of its tenant', () => {
    assert.equal(loadConfig({ TOOL_TASKS_MAX_PER_TENANT: '1000' }).TOOL_TASKS_MAX_PER_TENANT, 1000);
    assert.throws(() => loadConfig({ TOOL_TASKS_MAX_PER_TENANT: '1001' }), /TOOL_TASKS_MAX_PER_TENANT/);
  });

  it('the process stops at boot with a message naming the variable', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
      env: { PATH: process.env['PATH'], PORT: '-1' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /PORT/);
  });
});

describe('thread digest', () => {
  // The digest a stored anchor holds, as it was always made: the JSON of [system, tools, messages] (thread-anchor.ts).
  const whole = (system: unknown, tools: unknown[], messages: unknown[]) =>
    createHash('sha256')
      .update(JSON.stringify([system ?? null, tools.length ? tools : null, messages]))
      .digest('base64url');

  it('is the digest of the whole thread at each reply, as the history grows or is rewritten', () => {
    const d = new ThreadDigest();
    const tools = [{ name: 'calculate_sum', input_schema: { type: 'object' } }];
    const system = [{ type: 'text', text: 'be brief "quoted"' }];
    const h: any[] = [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }];
    assert.equal(d.of(undefined, [], []), whole(undefined, [], []));
    for (let i = 0; i < 4; i++) {
      h.push({ role: 'assistant', content: [use(`c${i}`)] });
      assert.equal(d.of(system, tools, h), whole(system, tools, h));
      h.push({ role: 'user', content: [res(`c${i}`)] });
    }
    // A message replaced (a moved cache marker, a merged follow-up): the digest follows the new history.
    h[2] = { ...h[2], content: [res('c0'), { type: 'text', text: 'and more' }] };
    assert.equal(d.of(system, tools, h), whole(system, tools, h));
    // A shorter history (a compaction), other tools, no system.
    assert.equal(d.of(system, tools, h.slice(0, 3)), whole(system, tools, h.slice(0, 3)));
    assert.equal(d.of(undefined, [], h), whole(undefined, [], h));
    assert.equal(d.of(system, [...tools], h), whole(system, tools, h));
  });
});
