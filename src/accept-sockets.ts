/**
 * The service's listening sockets, and the cap on the connections they accept together.
 *
 * libuv (1.45 and later: every Node.js this service runs on) accepts one connection per listening socket per turn of
 * the event loop, and relies on the next turn for the next one (libuv PR 3696). A replica busy with hundreds of
 * streaming runs takes 10–30 ms a turn, so a single socket accepts 30–100 connections a second: a burst of new
 * WebSockets (a replica's followers reconnecting to the others after it died; a ramp of new followers) waits in the
 * kernel's accept queue, already connected on the client's side, for seconds (docs/BENCHMARKS.md, B9: 300 followers
 * arriving over 2 s waited up to 7.8 s for their upgrade, though the upgrade itself took under 150 ms once
 * accepted), and once the queue is full the kernel drops new connections' SYNs, which clients retry after 1, 3, 7 s.
 *
 * So on Linux the port is served by `count` sockets bound with SO_REUSEPORT (the kernel spreads new connections over
 * them by their addresses): `count` accepts per turn. The HTTP server listens on the first (Fastify's `listen`);
 * the others hand each connection to it (its `connection` event), so every connection is served, timed out and
 * closed at shutdown as its own. MAX_CONNECTIONS counts the connections of all of them together.
 *
 * SO_REUSEPORT would also let a second process of the same user bind the same port and silently take part of its
 * connections: before binding, a probe without it checks that nothing holds the port (the refusal a second
 * `npm start` on a taken port has always had: EADDRINUSE).
 */
import type http from 'node:http';
import net from 'node:net';
import type { FastifyInstance } from 'fastify';

export interface AcceptOptions {
  port: number;
  host: string;
  /** Listening sockets (1: the HTTP server's own only; always 1 off Linux, where SO_REUSEPORT does not balance). */
  sockets: number;
  /** Open connections of all the sockets together; a connection beyond is closed at once, as Node does. */
  maxConnections: number;
}

/** Share of `maxConnections` open from which idle keep-alive connections are closed (reliefAtCap). */
const RELIEF_AT = 0.9;

/**
 * Relief at the connection cap: from RELIEF_AT of `maxConnections` open (or once Node dropped one at the cap), the
 * keep-alive connections that answered a request and have none in flight are closed (each relief costs what it
 * closes: the idle set holds nothing else). Without
 * it sockets that made one request each (`GET /healthz` needs no key) held the process's whole pool for the
 * keep-alive time, and every tenant's next connection was dropped. A connection that has not finished its first
 * request (a new client's), a request in flight, an SSE stream and a WebSocket (upgraded: no `request`) are kept; a
 * client whose idle connection was closed opens another. Node's own `closeIdleConnections()` would close a new
 * connection too (no request started yet counts as idle), which would drop the very client that crossed the mark.
 * Returns the `connection` listener (`connected`, which counts the connections itself) and `relieve`, for a
 * connection dropped elsewhere at the cap.
 */
function reliefAtCap(
  server: FastifyInstance['server'],
  maxConnections: number,
): { connected: (socket: net.Socket) => void; relieve: () => void } {
  let open = 0;
  const idle = new Set<net.Socket>();
  function closed(this: net.Socket) {
    open--;
    idle.delete(this);
  }
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const socket = req.socket;
    idle.delete(socket);
    // Answered, a keep-alive socket waits for its next request (`res.socket` is detached by then: `socket`).
    res.once('finish', () => {
      if (!socket.destroyed) idle.add(socket);
    });
  });
  const relieve = () => {
    for (const socket of idle) socket.destroy();
    idle.clear();
  };
  // A connection Node dropped at the cap (`drop`: it never reaches `connection`) asks for relief too.
  server.on('drop', relieve);
  return {
    relieve,
    connected: (socket) => {
      open++;
      socket.on('close', closed);
      if (open >= maxConnections * RELIEF_AT) relieve();
    },
  };
}

/** Fails with the bind error (EADDRINUSE, EACCES) when the port cannot be bound without SO_REUSEPORT. */
function probe(port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen({ port, host, exclusive: true }, () => s.close(() => resolve()));
  });
}

/**
 * Listens on `port` with `sockets` sockets (see above). Closing the Fastify instance stops every socket: the extra
 * ones in `preClose`, as Fastify stops the HTTP server's own, so none accepts during the shutdown.
 */
export async function listenWide(fastify: FastifyInstance, opts: AcceptOptions): Promise<void> {
  const count = process.platform === 'linux' ? Math.max(1, opts.sockets) : 1;
  const server = fastify.server;
  const relief = reliefAtCap(server, opts.maxConnections);
  if (count === 1) {
    server.maxConnections = opts.maxConnections;
    server.prependListener('connection', relief.connected);
    await fastify.listen({ port: opts.port, host: opts.host });
    return;
  }
  if (opts.port !== 0) await probe(opts.port, opts.host);

  // Every connection, whichever socket took it, passes the HTTP server's `connection` event: counted there. The HTTP
  // server's own socket checks Node's cap against its own count (net.Server `maxConnections`), so its cap is what the
  // others leave: it is lowered and raised as their connections open and close. The others check the total.
  // One listener function each for all connections, and `on` rather than `once` (a socket closes once): no closure
  // or wrapper per connection (B6 counts what an idle connection keeps).
  let open = 0;
  let viaOthers = 0;
  const setOwnCap = () => (server.maxConnections = Math.max(0, opts.maxConnections - viaOthers));
  const closed = () => void open--;
  const closedViaOther = () => {
    viaOthers--;
    setOwnCap();
  };
  server.prependListener('connection', (socket: net.Socket) => {
    open++;
    socket.on('close', closed);
    relief.connected(socket);
  });
  setOwnCap();
  const others: net.Server[] = [];
  // Hooks are added before `listen` (Fastify refuses them after); the sockets are made after it (they need its port).
  fastify.addHook('preClose', async () => {
    for (const s of others) s.close();
  });
  // Fastify hands its listen options to net.Server#listen as they are, `reusePort` (not in its types) included.
  const own = { port: opts.port, host: opts.host, reusePort: true };
  await fastify.listen(own);
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : opts.port;

  const handOver = (socket: net.Socket) => {
    if (open >= opts.maxConnections) {
      socket.destroy();
      relief.relieve();
      return;
    }
    viaOthers++;
    setOwnCap();
    socket.on('close', closedViaOther);
    server.emit('connection', socket);
  };
  for (let i = 1; i < count; i++) {
    // The HTTP server's own socket options (http.createServer's default: no Nagle delay).
    const s = net.createServer({ noDelay: true }, handOver);
    others.push(s);
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen({ port, host: opts.host, reusePort: true }, () => {
        s.off('error', reject);
        resolve();
      });
    });
  }
}
