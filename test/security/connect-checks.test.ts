/**
 * A tenant's MCP server is checked where its sockets connect, not only before: the transport's fetch goes through an
 * agent whose lookup resolves and checks every address at each connect (src/webhooks/address-guard.ts
 * `checkedLookup`), so a name re-pointed at a refused address after the check (DNS rebinding) reaches nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import pino from 'pino';
import { boundedFetch } from '../../src/mcp/bounded-fetch.js';
import { checkedLookup } from '../../src/webhooks/address-guard.js';

describe('connect-time address checks', () => {
  let server: Server;
  let port = 0;
  let hits = 0;
  before(async () => {
    server = createServer((_req, res) => {
      hits++;
      res.end('ok');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('a name that resolves to a loopback address is refused at connect; allowed, it is reached', async () => {
    const refusing = new Agent({ connect: { lookup: checkedLookup(false) } });
    const allowing = new Agent({ connect: { lookup: checkedLookup(true) } });
    try {
      const url = `http://localhost:${port}/mcp`;
      await assert.rejects(
        boundedFetch('probe', 65_536, pino({ level: 'silent' }), refusing)(url),
        (err: Error) => {
          const cause = (err as { cause?: Error }).cause;
          assert.match(
            String(cause?.message ?? err.message),
            /localhost resolves to a refused address \(loopback\); only public addresses/,
          );
          return true;
        },
      );
      assert.equal(hits, 0, 'nothing reached the server');
      const res = await boundedFetch('probe', 65_536, pino({ level: 'silent' }), allowing)(url);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), 'ok');
      assert.equal(hits, 1);
    } finally {
      await Promise.all([refusing.destroy(), allowing.destroy()]);
    }
  });
});
