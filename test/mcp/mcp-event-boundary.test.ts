/**
 * The MCP transport's bound on one SSE event (src/mcp/bounded-fetch.ts) counts the bytes since the last event
 * boundary. A boundary split across two socket reads (`\n` | `\n`, `\r\n\r` | `\n`, `\r\n` | `\r\n`) is still one:
 * two events each under the bound pass, however the stream is cut into reads (found by a review: the second read's
 * leading bytes were taken for the first event's, and a call's answer of two large events failed as too large).
 * The server here writes the second part only once the client has read the whole first, so the split is exact.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { boundedFetch } from '../../src/mcp/bounded-fetch.js';

/** TOOL_RESULT_MAX_BYTES here: one event may carry 2 × this + 64 KiB (98,304 bytes). */
const RESULT_MAX = 16_384;
/** An SSE event's `data:` line of `bytes` bytes, without its line ending. */
const event = (bytes: number) => {
  const line = `data: ${JSON.stringify({ jsonrpc: '2.0', method: 'x', params: { pad: '' } })}`;
  return line.replace('""', `"${'p'.repeat(bytes - line.length)}"`);
};

describe('an MCP answer whose event boundary falls between two reads', { timeout: 60_000 }, () => {
  /** The second part of the answer now being served: written when the test says the first was read. */
  let second: (() => void) | undefined;
  let parts: [string, string] = ['', ''];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(parts[0]);
      second = () => res.end(parts[1]);
    });
  });
  let url: string;
  before(async () => {
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((done) => server.close(() => done()));
  });

  for (const [name, end, start] of [
    ['\\n | \\n', '\n', '\n'],
    ['\\r\\n\\r | \\n', '\r\n\r', '\n'],
    ['\\r\\n | \\r\\n', '\r\n', '\r\n'],
  ] as const) {
    it(`counts each of two 60,000-byte events alone (${name})`, async () => {
      const first = event(60_000) + end;
      // The second event's own end is not sent: the count after its bytes is what the bound sees.
      parts = [first, `${start}${event(60_000)}`];
      const fetchBounded = boundedFetch('split', RESULT_MAX, pino({ level: 'silent' }));
      const res = await fetchBounded(url, { method: 'POST', body: '{}' });
      const reader = res.body!.getReader();
      let read = 0;
      while (read < first.length) {
        const { value, done } = await reader.read();
        assert.ok(!done, 'the first part arrives whole');
        read += value.byteLength;
      }
      assert.equal(read, first.length, 'nothing of the second part was sent yet');
      second!();
      for (;;) {
        const { value, done } = await reader.read(); // before the fix: McpResultTooLarge
        if (done) break;
        read += value.byteLength;
      }
      assert.equal(read, first.length + parts[1].length);
    });
  }
});
