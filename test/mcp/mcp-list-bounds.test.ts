/**
 * A server's tool list is kept in memory for every client of the pool: at most 1 MiB of its tools' JSON, whatever the
 * server lists (src/mcp/pool.ts LIST_MAX_BYTES).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { McpServerClient } from '../../src/mcp/pool.js';
import { startMcpServer, type TestMcpServer } from '../helpers/mcp-server.js';

describe("an MCP server's tool list", { timeout: 60_000 }, () => {
  let server: TestMcpServer;
  before(async () => {
    server = await startMcpServer();
  });
  after(() => server.kill());

  it('keeps at most 1 MiB of tools: those past it are not offered', async () => {
    // 150 tools of ~9 kB each (1.35 MB), in one page of tools/list.
    await server.addTool('bulk', { count: 150, describe: 9_000 });
    const client = new McpServerClient(
      { name: 'big', url: new URL(server.url), headers: {}, tenants: null },
      {
        callTimeoutMs: 10_000,
        toolsTtlMs: 60_000,
        connectTimeoutMs: 10_000,
        resultMaxBytes: 1_048_576,
        log: pino({ level: 'silent' }),
      },
    );
    try {
      const tools = await client.listTools();
      const bulk = tools.filter((t) => t.name.startsWith('bulk_'));
      const bytes = tools.reduce((n, t) => n + JSON.stringify(t).length, 0);
      assert.ok(bytes <= 1_048_576, `${bytes} bytes kept`);
      assert.ok(bulk.length >= 100 && bulk.length < 120, `${bulk.length} of 150 kept`);
    } finally {
      await client.close();
    }
  });
});
