/**
 * Request bodies are read as sent: the service decodes no `Content-Encoding` (no gzip, br, deflate…), so a body
 * with one is refused (415 `unsupported_media_type`) before it is read, rather than its compressed bytes parsed as
 * JSON. `identity` (or nothing) is the only coding accepted. A request without a body is not refused for the header.
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

const refuseEncoded: preParsingHookHandler = (req, _reply, payload, done) => {
  const coded = codings(req);
  if (coded.length === 0 || !hasBody(req)) return done(null, payload);
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
