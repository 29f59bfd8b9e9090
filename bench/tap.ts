/**
 * A loopback tap in front of the fake Messages API, in its own process (B3): it forwards every request to the fake
 * unchanged and stamps, for the latest `/v1/messages` response, when each text delta `#k …` crossed it (wall
 * clock, sub-millisecond: `performance.timeOrigin + performance.now()`, comparable with other processes on this
 * machine). That is the upstream's write time the fan-out latency of B3 is measured from.
 *
 *   node .data/bench-dist/bench/tap.js <fake url>   → prints {"url":"http://127.0.0.1:PORT"}
 *   GET /_tap/marks → {"start": ms, "marks": [[k, ms], …]}
 */
import http from 'node:http';

const target = new URL(process.argv[2] ?? '');
const now = () => performance.timeOrigin + performance.now();

let current: { start: number; marks: Array<[number, number]> } = { start: 0, marks: [] };

const server = http.createServer((req, res) => {
  if (req.url === '/_tap/marks') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(current));
    return;
  }
  const isMessages = req.url?.startsWith('/v1/messages') ?? false;
  const record = isMessages ? { start: now(), marks: [] as Array<[number, number]> } : null;
  if (record) current = record;
  const upstream = http.request(
    { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers },
    (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      let tail = '';
      up.on('data', (chunk: Buffer) => {
        const t = now();
        res.write(chunk);
        if (!record) return;
        const lines = (tail + chunk.toString('utf8')).split('\n');
        tail = lines.pop() ?? '';
        for (const line of lines) {
          if (!line.startsWith('data: ') || !line.includes('"text_delta"')) continue;
          const m = /#(\d+)/.exec(line);
          if (m) record.marks.push([Number(m[1]), t]);
        }
      });
      up.on('end', () => res.end());
      up.on('error', () => res.destroy());
    },
  );
  upstream.on('error', () => {
    if (!res.headersSent) res.writeHead(502);
    res.end();
  });
  res.on('close', () => upstream.destroy());
  req.pipe(upstream);
});
server.keepAliveTimeout = 65_000;

server.listen(0, '127.0.0.1', () => {
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}` })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
