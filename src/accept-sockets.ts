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
  if (count === 1) {
    server.maxConnections = opts.maxConnections;
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
