/**
 * Request bodies are read as sent: the service decodes no `Content-Encoding` (no gzip, br, deflate…), so a body
 * with one is refused (415 `unsupported_media_type`) before it is read, rather than its compressed bytes parsed as
 * JSON. `identity` (or nothing) is the only coding accepted. A request without a body is not refused for the header.
 * Likewise the body's text is UTF-8 (RFC 8259 §8.1): a `charset` other than `utf-8` is refused (415) before the body
 * is read, rather than its bytes read as UTF-8 and changed (src/app.ts refuses bytes that are not UTF-8: 400).
 */
import type { FastifyRequest, preParsingHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { HttpRefusal } from './error-status.js';

/** The codings `req`'s body was sent with that are not `identity` (empty: the body is as sent). */
function codings(req: FastifyRequest): string[] {
  const h = req.headers['content-encoding'];
  if (h === undefined) return [];
  return h
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
}

/** Whether `req` carries a body (a length above zero, or a chunked body). */
const hasBody = (req: FastifyRequest) =>
  req.headers['transfer-encoding'] !== undefined ||
  (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');

/** The `charset` parameter of `req`'s Content-Type, lower case, unquoted; null without one. */
function charset(req: FastifyRequest): string | null {
  const params = (req.headers['content-type'] ?? '').split(';').slice(1);
  for (const p of params) {
    const eq = p.indexOf('=');
    if (eq < 0 || p.slice(0, eq).trim().toLowerCase() !== 'charset') continue;
    return p
      .slice(eq + 1)
      .trim()
      .replace(/^"(.*)"$/, '$1')
      .toLowerCase();
  }
  return null;
}

const refuseEncoded: preParsingHookHandler = (req, _reply, payload, done) => {
  if (!hasBody(req)) return done(null, payload);
  const set = charset(req);
  if (set !== null && set !== 'utf-8' && set !== 'utf8')
    return done(
      new HttpRefusal('unsupported_media_type', 'Send JSON as UTF-8 (`charset=utf-8`, or no charset).', {
        charset: set.slice(0, 64),
      }),
    );
  const coded = codings(req);
  if (coded.length === 0) return done(null, payload);
  done(
    new HttpRefusal(
      'unsupported_media_type',
      'Request bodies are not decoded: send them without Content-Encoding (or `identity`).',
      { content_encoding: coded },
    ),
  );
};

export default fp(
  async (app) => {
    app.addHook('preParsing', refuseEncoded);
  },
  { name: 'content-encoding' },
);
