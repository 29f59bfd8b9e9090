import type { FastifyInstance, onRequestHookHandler } from 'fastify';

/**
 * `GET /docs/json` and `/docs/yaml` as the same bytes at every request. @fastify/swagger builds the document on its
 * first call and keeps the object (or the YAML text), but Fastify serialized those ~300 kB of JSON again at every
 * `GET /docs/json` (5–10 ms of event loop idle, 124–218 ms in the fuzzer's long run on a busy machine). Here each
 * form is serialized once, at its first request, and that request's bytes are sent to every later one.
 *
 * Not at boot: building the document converts every route's zod schemas (~0.3 s of CPU, over 1 s on the busy
 * 2-core machine, YAML as much again), which every boot of every test would pay for a page few of them read. The
 * routes stay @fastify/swagger-ui's own (documented by src/openapi/document.ts); this is an `onRequest` hook of
 * theirs, and only `ready` (every route registered) lets it cache, so the document is whole.
 */
export function servedDocument(fastify: FastifyInstance): onRequestHookHandler {
  const forms: Record<string, { type: string; build: () => string }> = {
    '/docs/json': { type: 'application/json; charset=utf-8', build: () => JSON.stringify(fastify.swagger()) },
    '/docs/yaml': { type: 'application/x-yaml', build: () => fastify.swagger({ yaml: true }) },
  };
  const bytes = new Map<string, Buffer>();
  let ready = false;
  fastify.addHook('onReady', async () => {
    ready = true;
  });
  return (req, reply, done) => {
    const url = req.routeOptions.url ?? '';
    const form = forms[url];
    // An upgrade is left to src/plugins/ws-handshake.ts (400: this route does not upgrade).
    if (!form || !ready || req.ws) return done();
    let body = bytes.get(url);
    if (!body) {
      body = Buffer.from(form.build());
      bytes.set(url, body);
    }
    reply.type(form.type).send(body);
  };
}
