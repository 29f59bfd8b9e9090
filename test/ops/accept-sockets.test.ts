/**
 * The service's listening sockets (src/accept-sockets.ts): a burst of connections that queued while the event loop
 * was busy is taken in a few turns of the loop, not one turn per connection (libuv accepts one connection per
 * listening socket per turn); MAX_CONNECTIONS holds across all the sockets; a port that another process holds, even
 * with SO_REUSEPORT, is refused; closing the instance frees the port.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { listenWide } from '../../src/accept-sockets.js';

const HOST = '127.0.0.1';

async function serve(sockets: number, maxConnections: number): Promise<[FastifyInstance, number]> {
  const app = Fastify();
  app.get('/', async () => 'ok');
  await listenWide(app, { port: 0, host: HOST, sockets, maxConnections });
  return [app, (app.server.address() as net.AddressInfo).port];
}

/**
 * Connects `count` times to `port` from another process while this one's event loop is blocked (spawnSync): the
 * kernel completes every handshake, and the connections wait in the accept queues, as a burst does behind a busy
 * loop. The child exits once all are established; its connections are still there to accept.
 */
function burst(port: number, count: number): void {
  const script =
    `const net = require('node:net'); let n = 0;` +
    `for (let i = 0; i < ${count}; i++) net.connect(${port}, '${HOST}').on('connect', () => { if (++n === ${count}) process.exit(0); });`;
  const r = spawnSync(process.execPath, ['-e', script], { timeout: 30_000 });
  assert.equal(r.status, 0, `the connecting process failed: ${r.stderr.toString()}`);
}

/** Turns of this process's event loop (one `setImmediate` each) until the server has had `count` connections. */
async function turnsToAccept(app: FastifyInstance, port: number, count: number): Promise<number> {
  let accepted = 0;
  app.server.on('connection', () => accepted++);
  burst(port, count);
  let turns = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      if (accepted >= count) return resolve();
      turns++;
      setImmediate(tick);
    };
    setImmediate(tick);
  });
  return turns;
}

/** Sends a GET on a socket; resolves with the status line's code, or 0 if the server closed the socket instead. */
function get(socket: net.Socket): Promise<number> {
  return new Promise((resolve) => {
    let got = '';
    const onData = (b: Buffer) => {
      got += b.toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(got);
      if (m) {
        socket.off('data', onData);
        resolve(Number(m[1]));
      }
    };
    socket.on('data', onData);
    socket.once('close', () => resolve(0));
    // A refused connection may be closed by the server already: its write fails, and it answers nothing.
    socket.on('error', () => resolve(0));
    if (!socket.writable) return resolve(0);
    socket.write(`GET / HTTP/1.1\r\nhost: x\r\n\r\n`);
  });
}

describe('listening sockets', () => {
  const COUNT = 64;

  it('takes a burst of connections in a few turns of a busy loop with 16 sockets', async () => {
    const [app, port] = await serve(16, 10_000);
    try {
      const turns = await turnsToAccept(app, port, COUNT);
      // Spread by the kernel over 16 queues, each turn takes one from every queue that has one.
      assert.ok(turns <= COUNT / 2, `${COUNT} queued connections took ${turns} turns to accept`);
    } finally {
      await app.close();
    }
  });

  it('(what it is for) with one socket, the same burst takes one turn per connection', async () => {
    const [app, port] = await serve(1, 10_000);
    try {
      const turns = await turnsToAccept(app, port, COUNT);
      assert.ok(turns >= COUNT / 2, `libuv accepted ${COUNT} connections in ${turns} turns`);
    } finally {
      await app.close();
    }
  });

  it('holds MAX_CONNECTIONS across all the sockets, and has room again once one closes', async () => {
    const [app, port] = await serve(8, 4);
    const serverSide: net.Socket[] = [];
    app.server.on('connection', (s: net.Socket) => serverSide.push(s));
    const clients: net.Socket[] = [];
    try {
      // 12 connections, one at a time: whichever socket each lands on, 4 are served and 8 closed at once.
      for (let i = 0; i < 12; i++) {
        const c = net.connect(port, HOST);
        await once(c, 'connect');
        clients.push(c);
      }
      const statuses = await Promise.all(clients.map(get));
      assert.equal(statuses.filter((s) => s === 200).length, 4, `statuses: ${statuses.join(' ')}`);
      assert.equal(statuses.filter((s) => s === 0).length, 8);
      assert.equal(serverSide.length, 4);

      const served = clients.find((_, i) => statuses[i] === 200)!;
      const closedOnServer = Promise.race(serverSide.map((s) => once(s, 'close')));
      served.destroy();
      await closedOnServer;
      const next = net.connect(port, HOST);
      clients.push(next);
      await once(next, 'connect');
      assert.equal(await get(next), 200);
    } finally {
      for (const c of clients) c.destroy();
      await app.close();
    }
  });

  it('refuses a port another process listens on with SO_REUSEPORT (EADDRINUSE), and frees its port on close', async () => {
    const holder = net.createServer();
    holder.listen({ port: 0, host: HOST, reusePort: true });
    await once(holder, 'listening');
    const port = (holder.address() as net.AddressInfo).port;
    const app = Fastify();
    try {
      await assert.rejects(
        listenWide(app, { port, host: HOST, sockets: 4, maxConnections: 100 }),
        (err: NodeJS.ErrnoException) => err.code === 'EADDRINUSE',
      );
    } finally {
      await app.close();
      await new Promise((resolve) => holder.close(resolve));
    }

    const [wide, widePort] = await serve(4, 100);
    await wide.close();
    // Every one of its 4 sockets is closed: the port binds without SO_REUSEPORT.
    const after = net.createServer();
    after.listen({ port: widePort, host: HOST, exclusive: true });
    await once(after, 'listening');
    await new Promise((resolve) => after.close(resolve));
  });
});
