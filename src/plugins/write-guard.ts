import fp from 'fastify-plugin';
import { wantsEventStream } from '../events/sink.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errorBody } from '../errors.js';
import { HttpRefusal } from './error-status.js';
import { Readable } from 'node:stream';
import { heavyStep } from '../tenant-turns.js';
import { Line } from '../line.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Ends this request's count among its tenant's reads of a whole history (write-guard.ts). */
    holdsRead?: () => void;
    /**
     * For a route of LATE_HEAVY_READS: takes the request's place in its tenant's line of heavy reads, when the route
     * comes to its heavy part; false when its client went away meanwhile (the reply is then hijacked: nothing to send).
     */
    heavyRead?: () => Promise<boolean>;
    /**
     * The answer's JSON text when this guard sends it as a stream of slices: hooks after it (the idempotency
     * record) read the text here, not the stream.
     */
    answerText?: string;
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
  /** A tenant's expensive reads made at once (TENANT_HEAVY_READS); its others wait in its line. */
  heavyReadsAtOnce: number;
}

/** Answers smaller than this are neither counted nor timed: the socket's buffer takes them at once. */
const COUNTED_BYTES = 64 * 1024;

/** Reads of a whole history (HISTORY_ROUTES) one tenant may have in progress at once in one process. */
const HISTORY_READS = 4;

/** Characters of a large answer written per turn of the event loop. */
const SLICE_CHARS = 64 * 1024;

/**
 * `text` in slices of SLICE_CHARS (never between the two halves of a surrogate pair), each a heavy step of `tenant`'s
 * (tenant-turns.ts): one slice of one of its answers per turn of the loop, however many of its answers are being
 * written (20 answers of 2 MB wrote 20 slices, 1.3 MB, in each turn).
 */
async function* slices(text: string, tenant: string): AsyncGenerator<string> {
  for (let at = 0; at < text.length;) {
    const wait = heavyStep(tenant);
    if (wait) await wait;
    let end = Math.min(at + SLICE_CHARS, text.length);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    yield text.slice(at, end);
    at = end;
  }
}

/**
 * The reads whose answer is made of up to a MiB or more of a tenant's own data (a list page, a whole history, the
 * iteration records, one record with its reply and tool results (up to MAX_TURN_BYTES of results, and, for a reply a
 * compaction moved, the whole segment that holds it read and decoded: megabytes),
 * the tool list, a JSON page of the event log — not its SSE stream, which is long-lived and paced by the
 * event hub's replay turns, src/events/replay-gate.ts): the synchronous work of one (decoding what Redis sent, the answer's JSON text) is 5–15 ms
 * of the event loop. One tenant has TENANT_HEAVY_READS (default 1) of them made at once per process; the others
 * wait in its line (FIFO), not in everyone's: several such reads of one tenant whose Redis replies arrived together
 * were made in one turn of the event loop (4 reads of a 2 MB history: a 43 ms turn, measured), ahead of every other
 * tenant's requests.
 */
const HEAVY_READS = new Set([
  '/v1/sessions',
  '/v1/sessions/:id/messages',
  '/v1/sessions/:id/iterations',
  '/v1/sessions/:id/iterations/:n',
  '/v1/sessions/:id/events',
  '/v1/sessions/:id/children',
  '/v1/schedules/:id/runs',
  '/v1/chat/:id/messages',
]);

/**
 * Heavy reads whose route takes its place in the line itself (`req.heavyRead()`), after a wait that is not its
 * tenant's to hold the line for: `GET /v1/tools` waits for the MCP servers' lists (up to MCP_CONNECT_TIMEOUT_MS for
 * one that does not answer) before its heavy part, the tenant's own tools (TENANT_MAX_TOOLS definitions of up to
 * BODY_LIMIT each).
 */
const LATE_HEAVY_READS = new Set(['/v1/tools']);

/**
 * The routes of HEAVY_READS that read a whole history (the chat's as UIMessages), or a whole kept segment of one (a
 * reply a compaction moved: a segment is all the history was when it was compacted, kept in one piece however large):
 * HISTORY_READS at once.
 */
const HISTORY_ROUTES = new Set([
  '/v1/sessions/:id/messages',
  '/v1/chat/:id/messages',
  '/v1/sessions/:id/iterations/:n',
]);

/** The route of HEAVY_READS that is also an SSE stream (`Accept: text/event-stream`, as routes/events.ts tells). */
const EVENTS_ROUTE = '/v1/sessions/:id/events';

/** A tenant's line of expensive reads: `size` at once, the others wait in arrival order. */
class TenantGate {
  private readonly line: Line;
  constructor(size: number) {
    this.line = new Line(size);
  }

  /** Resolves true once the request's turn comes; false if its client went away while it waited. */
  enter(res: NodeJS.EventEmitter): Promise<boolean> | boolean {
    // Set before either callback can run: both come later, from leave() or the socket's close.
    let resolve: (ok: boolean) => void = () => {};
    const gone = () => {
      this.line.cancel(go);
      resolve(false);
    };
    const go = () => {
      res.off('close', gone);
      resolve(true);
    };
    if (this.line.enter(go)) return true;
    res.once('close', gone);
    return new Promise<boolean>((r) => (resolve = r));
  }

  /** A request left (answered, failed, or gone while it waited); true when the line is empty. */
  leave(): boolean {
    this.line.leave();
    return this.line.idle;
  }
}

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
    const gates = new Map<string, TenantGate>();
    app.addHook('onRequest', async (req, reply) => {
      if (req.method !== 'GET') return;
      const tenant = req.tenant ?? '';
      if ((held.get(tenant) ?? 0) >= opts.tenantMaxBytes) throw overBytes(opts.tenantMaxBytes);
      const route = req.routeOptions.url ?? '';
      if (LATE_HEAVY_READS.has(route)) {
        req.heavyRead = () => inLine(req, reply, tenant, route);
        return;
      }
      if (!HEAVY_READS.has(route)) return;
      // An SSE stream would hold its place for as long as it is open: it is not a read made at once.
      if (route === EVENTS_ROUTE && wantsEventStream(req.headers.accept)) return;
      await inLine(req, reply, tenant, route);
    });
    /** The request in its tenant's line of heavy reads until its answer is made; false if its client went away. */
    const inLine = async (req: FastifyRequest, reply: FastifyReply, tenant: string, route: string) => {
      const history = HISTORY_ROUTES.has(route);
      const n = reading.get(tenant) ?? 0;
      if (history && n >= HISTORY_READS)
        throw new HttpRefusal(
          'rate_limited',
          `At most ${HISTORY_READS} reads of a whole history at once per tenant; try again shortly.`,
          undefined,
          { 'retry-after': '1', connection: 'close' },
        );
      if (history) reading.set(tenant, n + 1);
      let gate = gates.get(tenant);
      if (!gate) gates.set(tenant, (gate = new TenantGate(opts.heavyReadsAtOnce)));
      let done = false;
      let entered = false;
      const end = () => {
        if (done) return;
        done = true;
        if (history) {
          const m = (reading.get(tenant) ?? 1) - 1;
          if (m <= 0) reading.delete(tenant);
          else reading.set(tenant, m);
        }
        // A request gone while it waited held no place (the gate drops it from the line itself).
        if (entered && gate.leave()) gates.delete(tenant);
      };
      // Until the answer is made (onSend: its text exists, the socket's write is all that is left), or the request
      // ends some other way.
      reply.raw.once('close', end);
      req.holdsRead = end;
      // In the tenant's line: its other expensive reads are made one after another, each in turns of the event loop
      // of its own, so every other tenant's request waits for at most one of them (issue 22's noisy neighbour).
      entered = await gate.enter(reply.raw);
      if (!entered) reply.hijack();
      return entered;
    };
    app.addHook('onSend', async (req: FastifyRequest, reply: FastifyReply, payload: unknown) => {
      // Measuring a large answer (its UTF-8 length: the text flattened and scanned) is a heavy step of its tenant's
      // (tenant-turns.ts), not one more in the turn that made the text.
      if (typeof payload === 'string' && payload.length >= COUNTED_BYTES) {
        const wait = heavyStep(req.tenant ?? '');
        if (wait) await wait;
      }
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
        return JSON.stringify(errorBody(err.code, err.message, err.details, req.id));
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
      if (typeof payload !== 'string') return payload;
      // Written a slice per turn of the event loop: one write of a 2 MB answer (its UTF-8 encoding and copy into
      // the socket) was 5–10 ms of the loop in one go, ahead of every other tenant's requests.
      reply.header('content-length', size);
      req.answerText = payload;
      return Readable.from(slices(payload, tenant), { objectMode: false });
    });
  },
  { name: 'write-guard', dependencies: ['metrics'] },
);
