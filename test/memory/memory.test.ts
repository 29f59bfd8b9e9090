import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness, type Api } from '../helpers/service.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';

/** The memory tool: files per tenant in Redis, shared by the tenant's sessions, behind `/v1/memory`. */

const mem = (input: Record<string, unknown>, id?: string) =>
  toolCall('memory', input, id === undefined ? {} : { id });

/** The tool results of a session's history, in order. */
async function results(api: Api, id: string): Promise<Array<{ content: any; is_error?: boolean }>> {
  const msgs = (await api.get(`/v1/sessions/${id}/messages`)).body.data;
  return msgs.flatMap((m: any) =>
    m.role === 'user' && Array.isArray(m.content)
      ? m.content.filter((b: any) => b.type === 'tool_result')
      : [],
  );
}

const contentText = (c: any): string =>
  typeof c === 'string' ? c : c.map((b: any) => b.text ?? '').join('');

describe('the memory tool', () => {
  let h: Harness;
  let a: Api;
  let b: Api;
  before(async () => {
    h = await startHarness({
      env: {
        API_KEYS: 'ta:key-a,tb:key-b',
        MEMORY_MAX_FILE_BYTES: '100',
        MEMORY_MAX_TENANT_BYTES: '250',
        MEMORY_MAX_FILES: '4',
      },
    });
    a = h.api;
    b = h.api.as('key-b');
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  const run = async (api: Api, ...replies: Parameters<Harness['fake']['enqueue']>) => {
    h.fake.enqueue(...replies);
    const r = await api.post('/v1/sessions', { input: 'go', tools: ['memory'] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await api.waitStatus(r.body.id, ['idle', 'failed', 'requires_action']);
    assert.equal(s.status, 'idle', JSON.stringify(s));
    return { id: r.body.id as string, results: await results(api, r.body.id) };
  };

  it('one session writes, another of the same tenant reads; another tenant never sees it', async () => {
    // the definition sent is the SDK's memory tool
    const w = await run(
      a,
      mem({ command: 'create', path: '/memories/notes.md', file_text: 'colour: blue\n' }),
      mem({ command: 'str_replace', path: '/memories/notes.md', old_str: 'blue', new_str: 'green' }),
      mem({ command: 'insert', path: '/memories/notes.md', insert_line: 0, insert_text: '# Notes' }),
      text('Saved.'),
    );
    assert.deepEqual(
      h.fake.requests[0]!.body.tools?.find((t: any) => t.name === 'memory'),
      { type: 'memory_20250818', name: 'memory' },
    );
    assert.deepEqual(
      w.results.map((r) => r.is_error ?? false),
      [false, false, false],
      JSON.stringify(w.results),
    );
    const list = await a.get('/v1/memory');
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.data, [{ path: 'notes.md', size_bytes: 22 }]);
    assert.equal(list.body.total_bytes, 22);
    const file = await a.get('/v1/memory/notes.md');
    assert.deepEqual(file.body, { path: 'notes.md', content: '# Notes\ncolour: green\n', size_bytes: 22 });

    const r = await run(a, mem({ command: 'view', path: '/memories/notes.md' }), text('Read.'));
    assert.equal(r.results[0]!.is_error ?? false, false);
    assert.match(contentText(r.results[0]!.content), /1\t# Notes\n +2\tcolour: green/);
    const dir = await run(a, mem({ command: 'view', path: '/memories' }), text('Listed.'));
    assert.match(contentText(dir.results[0]!.content), /22\t\/memories\/notes\.md/);

    // tenant b: nothing, by the tool and by the routes
    const other = await run(b, mem({ command: 'view', path: '/memories/notes.md' }), text('Nothing.'));
    assert.equal(other.results[0]!.is_error, true);
    assert.match(contentText(other.results[0]!.content), /does not exist/);
    assert.deepEqual((await b.get('/v1/memory')).body.data, []);
    const missing = await b.get('/v1/memory/notes.md');
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error.code, 'file_not_found');
    assert.equal((await b.req('DELETE', '/v1/memory/notes.md')).status, 404);
    assert.equal((await a.get('/v1/memory/notes.md')).status, 200, "b's delete did not touch a's file");

    // GET /v1/tools lists it
    const tools = (await a.get('/v1/tools')).body.data;
    assert.ok(tools.some((t: any) => t.name === 'memory' && t.source === 'memory'));

    // rename and delete through the tool, then the route deletes
    await run(
      a,
      mem({ command: 'rename', old_path: '/memories/notes.md', new_path: '/memories/old/notes.md' }),
      text('Moved.'),
    );
    assert.deepEqual(
      (await a.get('/v1/memory')).body.data.map((f: any) => f.path),
      ['old/notes.md'],
    );
    const del = await a.req('DELETE', '/v1/memory/old/notes.md');
    assert.deepEqual(del.body, { path: 'old/notes.md', deleted: true });
    assert.deepEqual((await a.get('/v1/memory')).body, {
      data: [],
      total_bytes: 0,
      limits: { max_file_bytes: 100, max_tenant_bytes: 250, max_files: 4 },
    });
  });

  it('path traversal is refused, by the tool and by the routes', async () => {
    const bad = [
      '/memories/../evil',
      '/etc/passwd',
      '/memories/%2e%2e/x',
      '/memories/a\\b',
      '/memories/a\u0000b',
      'memories/x',
      '/memories//x',
    ];
    const r = await run(
      a,
      toolCalls(
        bad.map((p, i) => toolUse('memory', { command: 'create', path: p, file_text: 'x' }, `toolu_p${i}`)),
      ),
      text('Refused.'),
    );
    assert.equal(r.results.length, bad.length);
    for (const [i, res] of r.results.entries())
      assert.equal(res.is_error, true, `${bad[i]}: ${JSON.stringify(res)}`);
    const renamed = await run(
      a,
      mem({ command: 'create', path: '/memories/ok.md', file_text: 'ok' }),
      mem({ command: 'rename', old_path: '/memories/ok.md', new_path: '/memories/../../escaped' }),
      text('.'),
    );
    assert.equal(renamed.results[1]!.is_error, true);
    assert.deepEqual(
      (await a.get('/v1/memory')).body.data.map((f: any) => f.path),
      ['ok.md'],
    );
    for (const p of ['%2e%2e/evil', '..%2Fevil', 'a%5Cb', 'a%00b', '%2Fetc%2Fpasswd', 'x/%2e/y']) {
      // `%2e%2e` and `%2e` are dot segments to the URL parser (fetch resolves them before sending): such a request
      // names another path (`/v1/evil`, `/v1/memory/x/y`) and is answered 404, never with a file outside the tenant's.
      const g = await a.get(`/v1/memory/${p}`);
      if (p.includes('%2e')) assert.equal(g.status, 404, `${p}: ${JSON.stringify(g.body)}`);
      else {
        assert.equal(g.status, 400, `${p}: ${JSON.stringify(g.body)}`);
        assert.equal(g.body.error.code, 'invalid_memory_path');
      }
      assert.equal((await a.req('DELETE', `/v1/memory/${p}`)).status, g.status);
    }
    await a.req('DELETE', '/v1/memory/ok.md');
  });

  it('size caps per file and per tenant, and a file count cap', async () => {
    const big = 'x'.repeat(101);
    const r = await run(
      a,
      mem({ command: 'create', path: '/memories/big.md', file_text: big }),
      mem({ command: 'create', path: '/memories/a.md', file_text: `Z${'a'.repeat(99)}` }),
      mem({ command: 'create', path: '/memories/b.md', file_text: 'b'.repeat(100) }),
      mem({ command: 'create', path: '/memories/c.md', file_text: 'c'.repeat(60) }),
      mem({ command: 'str_replace', path: '/memories/a.md', old_str: 'Z', new_str: 'ZZ' }),
      mem({ command: 'create', path: '/memories/d.md', file_text: 'd' }),
      mem({ command: 'create', path: '/memories/e.md', file_text: 'e' }),
      text('Done.'),
    );
    const errs = r.results.map((x) => (x.is_error ? contentText(x.content) : 'ok'));
    assert.match(errs[0]!, /exceed 100 bytes/);
    assert.equal(errs[1], 'ok');
    assert.equal(errs[2], 'ok');
    assert.match(errs[3]!, /exceed 250 bytes/);
    assert.match(errs[4]!, /exceed 100 bytes/, 'an edit past the file cap');
    assert.equal(errs[5], 'ok');
    assert.equal(errs[6], 'ok');
    const list = (await a.get('/v1/memory')).body;
    assert.equal(list.total_bytes, 202);
    const seven = await run(a, mem({ command: 'create', path: '/memories/f.md', file_text: 'f' }), text('.'));
    assert.match(contentText(seven.results[0]!.content), /already has 4 files/);
    for (const f of list.data) await a.req('DELETE', `/v1/memory/${f.path}`);
    assert.equal((await a.get('/v1/memory')).body.total_bytes, 0);
  });

  it("keeps the SDK handler's rules: create makes only new files, a path is a file or a directory, renames stay within the path limits", async () => {
    const long = ['a', 'b', 'c', 'd'].map((c) => c.repeat(127)).join('/'); // 511 characters
    const deep = Array.from({ length: 16 }, () => 'l').join('/'); // 16 levels
    const r = await run(
      a,
      mem({ command: 'create', path: '/memories/k.md', file_text: 'one\ntwo' }),
      mem({ command: 'create', path: '/memories/k.md', file_text: 'replaced' }),
      mem({ command: 'insert', path: '/memories/k.md', insert_line: 1, insert_text: 'new\n' }),
      mem({ command: 'create', path: '/memories/k.md/x', file_text: 'under a file' }),
      mem({ command: 'create', path: '/memories/d/x', file_text: 'x' }),
      mem({ command: 'create', path: '/memories/d', file_text: 'over a directory' }),
      mem({ command: 'rename', old_path: '/memories/k.md', new_path: '/memories/d/x/k.md' }),
      mem({ command: 'rename', old_path: '/memories/d', new_path: `/memories/${long}` }),
      mem({ command: 'rename', old_path: '/memories/d', new_path: `/memories/${deep}` }),
      text('Done.'),
    );
    const outs = r.results.map((x) => (x.is_error ? `error: ${contentText(x.content)}` : 'ok'));
    assert.equal(outs[0], 'ok');
    assert.match(outs[1]!, /error: .*already exists/);
    assert.equal(outs[2], 'ok');
    assert.match(outs[3]!, /error: .*is a file/);
    assert.equal(outs[4], 'ok');
    assert.match(outs[5]!, /error: .*is a directory/);
    assert.match(outs[6]!, /error: .*is a file/);
    assert.match(outs[7]!, /error: .*past the limits/);
    assert.match(outs[8]!, /error: .*past the limits/);
    assert.deepEqual(
      (await a.get('/v1/memory/k.md')).body.content,
      'one\nnew\ntwo',
      'not replaced; no empty line',
    );
    assert.deepEqual(
      (await a.get('/v1/memory')).body.data.map((f: any) => f.path),
      ['d/x', 'k.md'],
    );
    for (const f of ['d/x', 'k.md']) await a.req('DELETE', `/v1/memory/${f}`);
  });
});
