import net from 'node:net';

/**
 * A TCP proxy in front of a Redis that weighs every reply Redis sends back: each connection's replies are parsed as
 * they stream (RESP2 and RESP3 framing; a bulk string is counted, never held), and the largest since `reset()` is
 * kept with the command it answered (each connection's commands, parsed likewise, in order), and the sum of them. For
 * asserting that no single command makes Redis send more than a bound, or that a read does not read what it need
 * not, which MONITOR and SLOWLOG do not show (they show what was sent to Redis, not what came back). A pub/sub connection's pushes answer no command: they are labelled `(push)` once its
 * commands' replies are paired.
 */
export interface ReplyMeter {
  /** `redis://127.0.0.1:<port>` of the proxy. */
  readonly url: string;
  /** The largest reply since the last `reset()` (bytes as sent, RESP framing included) and its command's first words. */
  largest(): { bytes: number; command: string };
  /** The bytes of every reply since the last `reset()`, on every connection (RESP framing included). */
  total(): number;
  reset(): void;
  close(): Promise<void>;
}

/**
 * A streaming RESP parser that reports each top-level value's length in bytes once it is complete, and its first
 * `keep` bulk strings (each cut to 80 bytes): enough to name a command a client sent.
 */
class RespValues {
  /** A header line not complete yet (it spans chunks). */
  private partial: Buffer = Buffer.alloc(0);
  /** Bytes of a bulk string (and its CRLF) still to come. */
  private skip = 0;
  /** The bulk string being read, when it is one of the first `keep`. */
  private capture: Buffer[] | null = null;
  /** Elements still to come of each aggregate open, innermost last. */
  private readonly open: number[] = [];
  private size = 0;
  private words: string[] = [];

  constructor(
    private readonly keep: number,
    private readonly done: (bytes: number, words: string[]) => void,
  ) {}

  feed(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - i);
        this.capture?.push(chunk.subarray(i, i + n));
        this.skip -= n;
        this.size += n;
        i += n;
        if (this.skip === 0) {
          // Without its CRLF, which `skip` counted.
          if (this.capture) {
            const word = Buffer.concat(this.capture);
            this.words.push(word.subarray(0, Math.min(80, word.length - 2)).toString('latin1'));
          }
          this.capture = null;
          this.ended();
        }
        continue;
      }
      const nl = chunk.indexOf(10, i);
      if (nl < 0) {
        this.partial = Buffer.concat([this.partial, chunk.subarray(i)]);
        this.size += chunk.length - i;
        return;
      }
      const line = Buffer.concat([this.partial, chunk.subarray(i, nl + 1)]).toString('latin1');
      this.partial = Buffer.alloc(0);
      this.size += nl + 1 - i;
      i = nl + 1;
      this.header(line.slice(0, -2));
    }
  }

  private header(line: string): void {
    const n = Number(line.slice(1));
    switch (line[0]) {
      case '$':
      case '=':
      case '!':
        if (n < 0) return this.ended();
        this.skip = n + 2;
        if (this.words.length < this.keep) this.capture = [];
        return;
      case '*':
      case '~':
      case '>':
        if (n <= 0) return this.ended();
        this.open.push(n);
        return;
      case '%':
        if (n <= 0) return this.ended();
        this.open.push(2 * n);
        return;
      default:
        // A simple string, error, integer, null, boolean, double or big number: one line.
        return this.ended();
    }
  }

  /** A value ended: it counts as one element of the aggregate around it, which may end with it, and so on up. */
  private ended(): void {
    while (this.open.length > 0) {
      const last = this.open.length - 1;
      if (--this.open[last]! > 0) return;
      this.open.pop();
    }
    // Bulk strings carry their CRLF in `skip`; what is left is the top-level value, whole.
    this.done(this.size, this.words);
    this.size = 0;
    this.words = [];
  }
}

export async function startReplyMeter(redisPort: number): Promise<ReplyMeter> {
  const sockets = new Set<net.Socket>();
  let top = { bytes: 0, command: '' };
  let sum = 0;
  const server = net.createServer((client) => {
    const upstream = net.connect(redisPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    const sent: string[] = [];
    const commands = new RespValues(2, (_bytes, words) => sent.push(words.join(' ')));
    const replies = new RespValues(0, (bytes) => {
      const command = sent.shift() ?? '(push)';
      sum += bytes;
      if (bytes > top.bytes) top = { bytes, command };
    });
    client.on('data', (chunk: Buffer) => {
      commands.feed(chunk);
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      replies.feed(chunk);
      client.write(chunk);
    });
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('the meter has no port');
  return {
    url: `redis://127.0.0.1:${address.port}`,
    largest: () => top,
    total: () => sum,
    reset() {
      top = { bytes: 0, command: '' };
      sum = 0;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
