/**
 * The Python worker of docs/API.md §7.5 (the block after `<!-- python-worker -->`), run as it is by the machine's
 * python3 against the service: it registers its tool, claims the session's calls, answers them (an exception as an
 * `is_error` result), and the session completes — through a proxy that answers its first claim 503, its first result
 * 502 without a body and cuts the connection of its second, which it must ride out (claim again, send the same
 * result again).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { ROOT } from '../helpers/openapi.js';
import { startHarness, type Harness } from '../helpers/service.js';

const python = spawnSync('python3', ['--version']).status === 0 ? 'python3' : null;

function workerSource(): string {
  const doc = readFileSync(path.join(ROOT, 'docs/API.md'), 'utf8');
  const m = /<!-- python-worker -->\n+```python\n([\s\S]*?)\n```/.exec(doc);
  assert.ok(m, 'docs/API.md has the python worker block');
  return m[1]!;
}

/** What the proxy does to a request: forward it, answer a status itself (without forwarding), or cut it. */
type Fault = { status: number; body: string } | 'cut';

/** A proxy to `target` that spends `faults[route]` (one per request, in order) before forwarding that route. */
async function faultyProxy(target: string, faults: Record<string, Fault[]>) {
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    const route = `${req.method} ${req.url!.replace(/tt_[^/]+/, ':id')}`;
    seen.push(route);
    const fault = faults[route]?.shift();
    if (fault === 'cut') return void req.socket.destroy();
    if (fault) {
      res.writeHead(fault.status, { 'content-type': 'application/json', 'retry-after': '1' });
      return void res.end(fault.body);
    }
    const up = http.request(
      new URL(req.url!, target),
      { method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      },
    );
    up.on('error', () => req.socket.destroy());
    req.pipe(up);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe(
  'the Python-stdlib worker of docs/API.md',
  { skip: python ? false : 'no python3', timeout: 120_000 },
  () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ env: { API_KEYS: 'acme:key-a' } });
    });
    after(async () => h?.close());

    it('runs a session’s calls end to end', async (t) => {
      const src = workerSource();
      assert.ok(src.split('\n').length <= 45, 'about 40 lines');
      const file = path.join(mkdtempSync(path.join(tmpdir(), 'pyworker-')), 'worker.py');
      writeFileSync(file, src);
      h.fake.enqueue(
        toolCalls([
          toolUse('reverse_text', { text: 'stressed' }, 'toolu_py1'),
          toolUse('reverse_text', {}, 'toolu_py2'),
        ]),
        text('desserts!'),
      );
      const proxy = await faultyProxy(h.service.url, {
        'POST /v1/tool-tasks/claim': [
          {
            status: 503,
            body: JSON.stringify({ error: { code: 'store_unavailable', message: 'Redis is down.' } }),
          },
        ],
        'POST /v1/tool-tasks/:id/result': [{ status: 502, body: '' }, 'cut'],
      });
      t.after(() => proxy.close());
      const child = spawn(python!, [file], {
        env: {
          PATH: process.env['PATH'] ?? '',
          HOME: process.env['HOME'] ?? '/tmp',
          BASE_URL: proxy.url,
          API_KEY: 'key-a',
          MAX_TASKS: '2',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      // The worker registers its tool first; the session names it once it exists.
      for (;;) {
        if ((await h.api.get('/v1/tools/reverse_text')).status === 200) break;
        const early = await Promise.race([exited, new Promise((r) => setTimeout(() => r('waiting'), 100))]);
        assert.equal(early, 'waiting', `the worker exited: ${err}`);
      }
      const created = await h.api.post('/v1/sessions', {
        input: 'reverse stressed',
        tools: ['reverse_text'],
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.id;
      await h.api.waitStatus(id, 'idle', 60_000);
      assert.equal(await exited, 0, err);
      const results = (h.fake.requests[1]!.messages.at(-1)!.content as any[]).filter(
        (b) => b.type === 'tool_result',
      );
      assert.deepEqual(results[0], { type: 'tool_result', tool_use_id: 'toolu_py1', content: 'desserts' });
      assert.equal(results[1].is_error, true);
      assert.equal(results[1].content, "Error: 'text'");
      assert.deepEqual(out.trim().split('\n').sort(), [`${id}:toolu_py1 200`, `${id}:toolu_py2 200`]);
      // Every fault was met and ridden out: a claim after the 503, each result sent until one was answered.
      assert.ok(proxy.seen.filter((r) => r === 'POST /v1/tool-tasks/claim').length >= 2);
      assert.equal(proxy.seen.filter((r) => r === 'POST /v1/tool-tasks/:id/result').length, 4);
    });
  },
);
