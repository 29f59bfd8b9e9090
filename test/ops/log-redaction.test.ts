import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import pino from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { loadConfig } from '../../src/config.js';
import { loggerOptions } from '../../src/boot.js';
import { skipRedactionOfPrimitives } from '../../src/log.js';

/** A pino logger with the service's redaction writing its lines (no time, no pid) into `lines`. */
function logger(lines: string[]) {
  const out = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString('utf8'));
      done();
    },
  });
  const opts = loggerOptions(loadConfig({}));
  return pino({ ...opts, level: 'info', timestamp: false, base: null }, out);
}

const SAMPLES: Array<[Record<string, unknown>, string]> = [
  [{ route: '/v1/sessions', method: 'POST', status: 201, ms: 3, tenant: 'acme' }, 'request'],
  [
    { s: 'quote " backslash \\ newline \n tab \t nul \u0000 é 😀 \u2028', long: 'x'.repeat(100) + '"' },
    'strings',
  ],
  [
    { n: 1.5, big: 2 ** 60, neg: -0, nan: Number.NaN, inf: Infinity, yes: true, no: false, nil: null },
    'numbers',
  ],
  [
    { creds: { apiKey: 'sk-secret', other: 1 }, auth: { token: 'tok' }, list: ['a', { token: 'x' }] },
    'objects',
  ],
  [
    { ANTHROPIC_API_KEY: 'top-level is not a wildcard match', cfg: { ANTHROPIC_API_KEY: 'k', keep: 'v' } },
    'cfg',
  ],
  [{ req: { headers: { authorization: 'Bearer x', 'x-api-key': 'k', accept: '*/*' } } }, 'req'],
  [{ headers: { authorization: 'Bearer y' }, MCP_SERVERS: { a: 1 } }, 'headers'],
  [{ err: Object.assign(new Error('boom'), { token: 'in-error' }) }, 'error'],
];

describe('log redaction: primitives skip the wildcard redactor, lines unchanged (src/log.ts)', () => {
  it('writes every line byte for byte as pino’s redaction does, secrets still redacted', () => {
    const plain: string[] = [];
    const fast: string[] = [];
    const a = logger(plain);
    const b = logger(fast);
    const wildcardOf = (l: object) =>
      (l as Record<symbol, Record<symbol, unknown>>)[pino.symbols.stringifiersSym]![
        pino.symbols.wildcardFirstSym
      ];
    const before = wildcardOf(b);
    skipRedactionOfPrimitives(b as unknown as FastifyBaseLogger);
    assert.notEqual(wildcardOf(b), before, 'the wildcard stringifier was replaced');
    for (const [obj, msg] of SAMPLES) {
      a.info(obj, msg);
      b.info(obj, msg);
      // Children share the root's stringifiers (bindings included).
      a.child({ component: 'engine', session: 's1' }).warn(obj, msg);
      b.child({ component: 'engine', session: 's1' }).warn(obj, msg);
    }
    // Errors carry their stack, the same in both loggers: compare with it.
    assert.deepEqual(fast, plain);
    const all = fast.join('');
    for (const secret of ['sk-secret', '"tok"', 'Bearer', 'in-error', '"k"'])
      assert.ok(!all.includes(secret), secret);
    assert.ok(all.includes('[redacted]'));
  });

  it('leaves a logger without wildcard redaction alone', () => {
    const lines: string[] = [];
    const out = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString('utf8'));
        done();
      },
    });
    const l = pino({ timestamp: false, base: null }, out);
    skipRedactionOfPrimitives(l as unknown as FastifyBaseLogger);
    l.info({ a: 'b' }, 'x');
    assert.deepEqual(lines, ['{"level":30,"a":"b","msg":"x"}\n']);
  });
});
