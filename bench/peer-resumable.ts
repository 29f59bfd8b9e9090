/**
 * The B3 peer: the same fan-out through the npm package `resumable-stream` (Redis pub/sub, ioredis clients), in its
 * own process, with the same transport as the service (WebSocket text frames).
 *
 *   node .data/bench-dist/bench/peer-resumable.js <redis url> <fake url>   → prints {"url":"http://127.0.0.1:PORT"}
 *
 * `POST /produce?id=X` makes the producer of stream X (resumable-stream's `createNewResumableStream`); its source
 * waits for `POST /go?id=X`, then streams one Messages API turn from the fake with the SDK and writes each raw
 * stream event as one line of JSON. `GET /stream?id=X` (WebSocket) is a reader: `resumeExistingStream(X)`, every
 * chunk sent as one text frame (a chunk may hold several lines when the producer catches a reader up).
 */
import Anthropic from '@anthropic-ai/sdk';
import http from 'node:http';
import { Redis } from 'ioredis';
import { createResumableStreamContext } from 'resumable-stream/ioredis';
import { WebSocketServer } from 'ws';

const [redisUrl, fakeUrl] = process.argv.slice(2);
if (!redisUrl || !fakeUrl) {
  process.stderr.write('usage: peer-resumable.ts <redis url> <fake url>\n');
  process.exit(2);
}

const client = new Anthropic({ apiKey: 'bench-key', baseURL: fakeUrl, maxRetries: 2 });
const publisher = new Redis(redisUrl);
const subscriber = new Redis(redisUrl);
const ctx = createResumableStreamContext({ waitUntil: null, publisher, subscriber });
const gates = new Map<string, () => void>();

function source(id: string): ReadableStream<string> {
  const gate = new Promise<void>((resolve) => gates.set(id, resolve));
  return new ReadableStream<string>({
    async start(controller) {
      await gate;
      try {
        const stream = await client.beta.messages.create({
          model: 'claude-sonnet-5-5',
          max_tokens: 8192,
          messages: [{ role: 'user', content: `peer ${id}` }],
          stream: true,
        });
        for await (const event of stream) controller.enqueue(`${JSON.stringify(event)}\n`);
        controller.close();
      } catch (err) {
        controller.error(err);
      }
    },
  });
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://peer');
  const id = url.searchParams.get('id') ?? '';
  const done = (status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  if (req.method === 'POST' && url.pathname === '/produce') {
    ctx
      .createNewResumableStream(id, () => source(id))
      .then(
        (own) => {
          // The producer's own reader (the request that started the stream, in resumable-stream's model).
          if (own) {
            const reader = own.getReader();
            const pump = (): Promise<void> => reader.read().then((r) => (r.done ? undefined : pump()));
            void pump().catch(() => {});
          }
          done(200, { ok: true });
        },
        (err) => done(500, { error: String(err) }),
      );
    return;
  }
  if (req.method === 'POST' && url.pathname === '/go') {
    const go = gates.get(id);
    gates.delete(id);
    go?.();
    return done(go ? 200 : 404, { ok: !!go });
  }
  done(404, { error: 'not found' });
});

const wss = new WebSocketServer({ server, path: '/stream', perMessageDeflate: false });
wss.on('connection', (ws, req) => {
  const id = new URL(req.url ?? '/', 'http://peer').searchParams.get('id') ?? '';
  ctx.resumeExistingStream(id).then(
    async (stream) => {
      if (!stream) return ws.close(1011, 'no such stream');
      const reader = stream.getReader();
      ws.once('close', () => void reader.cancel().catch(() => {}));
      ws.send('{"type":"ready"}\n');
      while (true) {
        const { done, value } = await reader.read();
        if (done) break;
        if (value) ws.send(value);
      }
      ws.close(1000, 'done');
    },
    () => ws.close(1011, 'resume failed'),
  );
});

server.listen(0, '127.0.0.1', () => {
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}` })}\n`);
});

const stop = () => {
  wss.close();
  server.close();
  publisher.disconnect();
  subscriber.disconnect();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
