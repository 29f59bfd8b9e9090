/**
 * The Python client (clients/python, on httpx) against the real service: its own unittest suite (sessions,
 * approvals, errors with codes, tenancy, pagination, the async client, a real webhook delivery verified, its
 * TypedDicts checked against openapi.json), and `follow()` across a real cut of its connection (a TCP proxy the
 * test breaks mid-stream), which must yield every event exactly once. Runs on Debian's python3 with python3-httpx
 * (installed by test/deps.sh).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { ROOT, OPENAPI_JSON } from '../helpers/openapi.js';
import { startHarness, type Harness } from '../helpers/service.js';

const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const PKG = path.join(ROOT, 'clients/python');
const KEYS = 'py:key-python,other:key-other';

/** A loopback TCP proxy to `port` whose open connections the test can cut. */
async function cuttableProxy(port: number) {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
    }
    client.pipe(upstream).pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    cut: () => {
      const n = sockets.size;
      for (const s of sockets) s.destroy();
      return n;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('the Python client', () => {
  let h: Harness;
  before(async () => {
    // Heartbeats every 200 ms: wait_for's deadline must hold while they keep its stream busy.
    h = await startHarness({
      env: { API_KEYS: KEYS, WEBHOOK_ALLOW_PRIVATE: 'true', STREAM_HEARTBEAT_MS: '200' },
    });
  });
  after(async () => h.close());

  test('its unittest suite passes against the service', async () => {
    const child = spawn(PYTHON, ['-m', 'unittest', 'discover', '-s', 'tests', '-p', 'test_*.py', '-v'], {
      cwd: PKG,
      env: {
        PATH: process.env['PATH'] ?? '',
        TRS_BASE_URL: h.service.url,
        TRS_API_KEY: 'key-python',
        TRS_OTHER_KEY: 'key-other',
        TRS_OPENAPI: OPENAPI_JSON,
        PYTHONDONTWRITEBYTECODE: '1',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 240_000,
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];
    assert.equal(code, 0, output);
    assert.match(output, /Ran \d+ tests/);
    assert.match(output, /\nOK\b/);
  });

  test('follow() resumes after its connection is cut, every event exactly once', async () => {
    const proxy = await cuttableProxy(Number(new URL(h.service.url).port));
    try {
      const created = await h.api.req('POST', '/v1/sessions', {
        input: 'What is the weather in Paris?',
        tools: ['get_weather'],
        approval: 'always',
      });
      assert.equal(created.status, 201);
      const id: string = created.body.id;
      const waiting = await h.api.waitStatus(id, 'requires_action', 30_000);
      const child = spawn(PYTHON, [path.join(PKG, 'tests/follow_cli.py'), proxy.url, 'key-python', id], {
        env: { PATH: process.env['PATH'] ?? '', PYTHONDONTWRITEBYTECODE: '1' },
        stdio: ['ignore', 'pipe', 'inherit'],
        timeout: 60_000,
      });
      const lines = createInterface({ input: child.stdout });
      const seen: { id: string; type: string }[] = [];
      let cut = false;
      for await (const line of lines) {
        const ev = JSON.parse(line) as { id: string; type: string };
        seen.push(ev);
        if (!cut && ev.type === 'session.status') {
          // The replay reached the wait for an approval: cut the stream, then decide while it is down.
          cut = true;
          assert.ok(proxy.cut() > 0, 'a connection to cut');
          for (const call of waiting.required_action.tool_calls as { id: string }[]) {
            const decided = await h.api.req('POST', `/v1/sessions/${id}/tool-calls/${call.id}`, {
              decision: 'approve',
            });
            assert.equal(decided.status < 300, true, JSON.stringify(decided.body));
          }
        }
      }
      const [code] = (await once(child, 'exit')) as [number | null];
      assert.equal(code, 0);
      const log = await h.api.req('GET', `/v1/sessions/${id}/events?limit=500`);
      const expected = (log.body.data as { id: string; type: string }[]).map((e) => e.id);
      const lastSeen = seen.at(-1)!.id;
      assert.deepEqual(
        seen.map((e) => e.id),
        expected.slice(0, expected.indexOf(lastSeen) + 1),
        'every event of the log up to the end of the run, once each, in order',
      );
      assert.ok(
        seen.some((e) => e.type === 'tool.completed'),
        'events after the cut came through',
      );
    } finally {
      await proxy.close();
    }
  });
});
