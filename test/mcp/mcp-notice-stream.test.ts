/**
 * A tenant's MCP server cannot keep the service reconnecting or reading its notice stream (the standalone GET SSE
 * stream) for ever (found by a probe): the SDK opens it again at once whenever the server ends it (`retry: 0`), and
 * reads an endless one without end. Each stream is cut at STANDALONE_MAX_BYTES; a connection opens at most
 * STANDALONE_OPENS of them a minute, then has none (its tools are listed again after the tools TTL); its calls go on.
 * The server here is plain HTTP on purpose: the MCP SDK's own server never misbehaves this way.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { McpServerClient } from '../../src/mcp/pool.js';
import { STANDALONE_MAX_BYTES, STANDALONE_OPENS } from '../../src/mcp/bounded-fetch.js';

type Mode = 'reconnect' | 'flood';

/** A minimal Streamable HTTP MCP server whose notice stream misbehaves as `mode` says. */
function misbehaving(mode: Mode) {
  const stats = { gets: 0, closed: 0, calls: 0 };
  const notice = Buffer.from(
    'data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}\n\n'.repeat(
      200,
    ),
  );
  const server = http.createServer((req, res) => {
    if (req.method === 'GET') {
      stats.gets++;
      res.on('close', () => stats.closed++);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'mcp-session-id': 's1' });
      if (mode === 'reconnect') return void res.end('retry: 0\n\n');
      const pump = () => {
        while (!res.destroyed) if (!res.write(notice)) return void res.once('drain', pump);
      };
      return pump();
    }
    if (req.method === 'DELETE') return void res.writeHead(200).end();
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const msg = JSON.parse(Buffer.concat(chunks).toString() || '{}');
      if (msg.id === undefined) return void res.writeHead(202, { 'mcp-session-id': 's1' }).end();
      let result: unknown = {};
      if (msg.method === 'initialize')
        result = {
          protocolVersion: msg.params.protocolVersion,
          capabilities: { tools: { listChanged: true } },
          serverInfo: { name: 'misbehaving', version: '1' },
        };
      else if (msg.method === 'tools/list')
        result = { tools: [{ name: 'echo', description: 'Echoes.', inputSchema: { type: 'object' } }] };
      else if (msg.method === 'tools/call') {
        stats.calls++;
        result = { content: [{ type: 'text', text: 'ok' }] };
      }
      res
        .writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 's1' })
        .end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result }));
    });
  });
  return { server, stats };
}

/** A pino logger whose lines the test can wait for. */
function watchedLog() {
  const lines: Array<Record<string, unknown>> = [];
  const waiters: Array<{ test: (l: Record<string, unknown>) => boolean; done: () => void }> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const text of chunk.toString('utf8').split('\n').filter(Boolean)) {
        const line = JSON.parse(text) as Record<string, unknown>;
        lines.push(line);
        for (const w of waiters.filter((x) => x.test(line))) {
          waiters.splice(waiters.indexOf(w), 1);
          w.done();
        }
      }
      cb();
    },
  });
  const until = (test: (l: Record<string, unknown>) => boolean) =>
    lines.some(test) ? Promise.resolve() : new Promise<void>((done) => waiters.push({ test, done }));
  return { log: pino({ level: 'warn' }, sink), lines, until };
}

for (const mode of ['reconnect', 'flood'] as const) {
  describe(
    `an MCP server whose notice stream ${mode === 'reconnect' ? 'ends at once (retry: 0)' : 'never ends'}`,
    { timeout: 60_000 },
    () => {
      const { server, stats } = misbehaving(mode);
      let url: URL;
      before(async () => {
        await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
        url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`);
      });
      after(async () => {
        server.closeAllConnections();
        await new Promise<void>((done) => server.close(() => done()));
      });

      it(`is opened at most ${STANDALONE_OPENS} times, each read at most ${STANDALONE_MAX_BYTES} bytes; calls go on`, async () => {
        const watched = watchedLog();
        const client = new McpServerClient(
          { name: 'misbehaving', url, headers: {}, tenants: null },
          {
            callTimeoutMs: 10_000,
            toolsTtlMs: 60_000,
            connectTimeoutMs: 10_000,
            // A small result bound in the flood case: a call's stream bound (a few times it) is not the notice stream's.
            resultMaxBytes: mode === 'flood' ? 16_384 : 1_048_576,
            log: watched.log,
          },
        );
        try {
          assert.deepEqual(
            (await client.listTools()).map((t) => t.name),
            ['echo'],
          );
          await watched.until((l) => /notice stream ended too often/.test(String(l['msg'])));
          assert.equal(stats.gets, STANDALONE_OPENS);
          if (mode === 'flood') {
            const cuts = watched.lines.filter((l) => /cut at its byte bound/.test(String(l['msg'])));
            assert.equal(cuts.length, STANDALONE_OPENS);
            // One read past the bound at most (a socket read: 64 KiB, more on a busy machine).
            for (const c of cuts)
              assert.ok(Number(c['bytes']) <= STANDALONE_MAX_BYTES + 262_144, String(c['bytes']));
          }
          // The connection still serves its calls.
          const r = await client.callTool('echo', {}, undefined);
          assert.deepEqual(r.content, [{ type: 'text', text: 'ok' }]);
          assert.equal(stats.calls, 1);
          assert.equal(stats.gets, STANDALONE_OPENS, 'no stream opened since');
        } finally {
          await client.close();
        }
      });
    },
  );
}
