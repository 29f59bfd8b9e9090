import fp from 'fastify-plugin';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errorBody } from '../errors.js';
import { HttpRefusal } from './error-status.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Ends this request's count among its tenant's reads of a whole history (write-guard.ts). */
    holdsRead?: () => void;
  }
}

/** 429 for a tenant whose clients leave too many bytes unread; the connection is not kept (its client does not read). */
const overBytes = (limit: number) =>
  new HttpRefusal(
    'quota_exceeded',
    `The tenant's clients leave ${limit} bytes of answers unread, the most TENANT_MAX_BUFFERED_BYTES allows.`,
    { quota: 'buffered_bytes', limit },
    { 'retry-after': '5', connection: 'close' },
  );

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

/** Reads of a whole history (GET …/messages) one tenant may have in progress at once in one process. */
const HISTORY_READS = 4;

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
    // Before the work: a tenant whose clients already leave its bound unread, or that reads HISTORY_READS whole
    // histories at once, is refused before Redis is asked (one connection carries every tenant's commands: a
    // tenant's 20 reads of 7 MB would queue everyone's commands behind 140 MB of answers).
    const reading = new Map<string, number>();
    app.addHook('onRequest', async (req, reply) => {
      if (req.method !== 'GET') return;
      const tenant = req.tenant ?? '';
      if ((held.get(tenant) ?? 0) >= opts.tenantMaxBytes) throw overBytes(opts.tenantMaxBytes);
      if (req.routeOptions.url !== '/v1/sessions/:id/messages') return;
      const n = reading.get(tenant) ?? 0;
      if (n >= HISTORY_READS)
        throw new HttpRefusal(
          'rate_limited',
          `At most ${HISTORY_READS} reads of a whole history at once per tenant; try again shortly.`,
          undefined,
          { 'retry-after': '1', connection: 'close' },
        );
      reading.set(tenant, n + 1);
      let done = false;
      const end = () => {
        if (done) return;
        done = true;
        const m = (reading.get(tenant) ?? 1) - 1;
        if (m <= 0) reading.delete(tenant);
        else reading.set(tenant, m);
      };
      // Until the answer is written (onSend), or the request ends some other way.
      reply.raw.once('close', end);
      req.holdsRead = end;
    });
    app.addHook('onSend', async (req: FastifyRequest, reply: FastifyReply, payload: unknown) => {
      const size =
        typeof payload === 'string'
          ? Buffer.byteLength(payload)
          : Buffer.isBuffer(payload)
            ? payload.length
            : 0;
      req.holdsRead?.();
      if (size < COUNTED_BYTES) return payload;
      const socket = req.raw.socket;
      if (socket.writableLength + size > opts.connectionMaxBytes) {
        socket.destroy();
        return payload;
      }
      const tenant = req.tenant ?? '';
      if ((held.get(tenant) ?? 0) + size > opts.tenantMaxBytes) {
        const err = overBytes(opts.tenantMaxBytes);
        reply
          .code(429)
          .header('content-type', 'application/json; charset=utf-8')
          .headers(err.headers ?? {});
        return JSON.stringify(errorBody(err.code, err.message, err.details));
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
