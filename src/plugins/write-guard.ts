import fp from 'fastify-plugin';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errorBody } from '../errors.js';

export interface WriteGuardOptions {
  /** An answer not taken whole by its client within this long has its socket destroyed (RESPONSE_WRITE_TIMEOUT_MS). */
  writeTimeoutMs: number;
  /** Bytes of answers one tenant's clients may leave untaken at once in this process (TENANT_MAX_BUFFERED_BYTES). */
  tenantMaxBytes: number;
  /** Bytes one connection may hold unflushed; a socket over it is destroyed (CONNECTION_MAX_BUFFERED_BYTES). */
  connectionMaxBytes: number;
}

/** Answers smaller than this are neither counted nor timed: the socket's buffer takes them at once. */
const COUNTED_BYTES = 64 * 1024;

/**
 * Clients that do not read their answers (issue 22): every REST answer of the /v1 scope that is not taken at once
 * counts its bytes against its tenant until the socket has flushed it, and gets a write deadline. A tenant over
 * its bytes gets 429 `quota_exceeded` (`details.quota: "buffered_bytes"`, Retry-After) instead of the body; an answer past its deadline, or a connection holding more than its bound, is cut (socket destroyed), which
 * gives its bytes back. Event streams (SSE, WebSocket) have their own slow-reader bound (events/sink.ts).
 */
export default fp<WriteGuardOptions>(
  async (app, opts) => {
    const held = new Map<string, number>();
    const change = (tenant: string, n: number) => {
      const v = (held.get(tenant) ?? 0) + n;
      if (v <= 0) held.delete(tenant);
      else held.set(tenant, v);
      app.metrics.responseBytesHeld.inc(n);
    };
    app.addHook('onSend', async (req: FastifyRequest, reply: FastifyReply, payload: unknown) => {
      const size =
        typeof payload === 'string'
          ? Buffer.byteLength(payload)
          : Buffer.isBuffer(payload)
            ? payload.length
            : 0;
      if (size < COUNTED_BYTES) return payload;
      const socket = req.raw.socket;
      if (socket.writableLength + size > opts.connectionMaxBytes) {
        socket.destroy();
        return payload;
      }
      const tenant = req.tenant ?? '';
      if ((held.get(tenant) ?? 0) + size > opts.tenantMaxBytes) {
        reply.code(429).header('content-type', 'application/json; charset=utf-8').header('retry-after', '5');
        // The connection is not kept: its client is one that leaves answers unread.
        reply.header('connection', 'close');
        return JSON.stringify(
          errorBody(
            'quota_exceeded',
            `The tenant's clients leave ${opts.tenantMaxBytes} bytes of answers unread, the most TENANT_MAX_BUFFERED_BYTES allows.`,
            { quota: 'buffered_bytes', limit: opts.tenantMaxBytes },
          ),
        );
      }
      change(tenant, size);
      const res = reply.raw;
      const timer = setTimeout(() => res.destroy(), opts.writeTimeoutMs);
      timer.unref();
      let done = false;
      const release = () => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        change(tenant, -size);
      };
      res.once('finish', release);
      res.once('close', release);
      return payload;
    });
  },
  { name: 'write-guard', dependencies: ['metrics'] },
);
