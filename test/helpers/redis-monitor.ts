import net from 'node:net';

/** The bytes of one argument as MONITOR prints it (Redis's `sdscatrepr`: `\"`, `\\`, `\n`…, `\xHH`). */
function unquote(text: string): string {
  const bytes: number[] = [];
  const escapes: Record<string, number> = { n: 10, r: 13, t: 9, a: 7, b: 8 };
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c !== '\\') {
      bytes.push(c.charCodeAt(0));
      continue;
    }
    const next = text[i + 1]!;
    if (next === 'x') {
      bytes.push(parseInt(text.slice(i + 2, i + 4), 16));
      i += 3;
    } else {
      bytes.push(escapes[next] ?? next.charCodeAt(0));
      i += 1;
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

/** The arguments of a MONITOR line's command (`"cmd" "arg" …`), decoded. */
export function monitorArgs(line: string): string[] {
  return [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => unquote(m[1]!));
}

export interface RedisMonitor {
  /** The commands clients sent, each as its decoded arguments, in the order Redis ran them. */
  commands: string[][];
  /** The commands scripts ran (`redis.call` inside EVAL/FCALL), in the same form. */
  scripted: string[][];
  /**
   * Resolves once every command Redis ran before this call is in `commands`/`scripted`. MONITOR's lines reach this
   * process on a socket of their own, so an answer on another connection (an HTTP reply, a client's reply) can
   * arrive before the lines of the commands that made it: a marker sent after them, seen here, orders them.
   */
  settle(): Promise<void>;
  stop(): void;
}

/** A plain socket in MONITOR mode on `port` (no client library: ioredis's monitor mode races its own command queue). */
export async function monitorRedis(port: number): Promise<RedisMonitor> {
  const socket = net.connect(port, '127.0.0.1');
  // MONITOR lines are ASCII: every other byte is printed as `\xHH`.
  socket.setEncoding('latin1');
  const commands: string[][] = [];
  const scripted: string[][] = [];
  const markers = new Map<string, () => void>();
  let buf = '';
  socket.on('data', (chunk: string) => {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf('\r\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      const m = /^\+\S+ \[\d+ (\S+)\] (.*)$/.exec(line);
      if (!m) continue;
      const args = monitorArgs(m[2]!);
      const seen = args[0]?.toLowerCase() === 'echo' ? markers.get(args[1] ?? '') : undefined;
      if (seen) seen();
      else (m[1] === 'lua' ? scripted : commands).push(args);
    }
  });
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  socket.write('MONITOR\r\n');
  await new Promise<void>((resolve) => socket.once('data', () => resolve()));
  let n = 0;
  const settle = async (): Promise<void> => {
    const mark = `monitor-settle-${process.pid}-${++n}`;
    const seen = new Promise<void>((resolve) => markers.set(mark, resolve));
    const sender = net.connect(port, '127.0.0.1');
    sender.on('error', () => {});
    sender.write(`ECHO ${mark}\r\n`);
    await seen;
    markers.delete(mark);
    sender.destroy();
  };
  return { commands, scripted, settle, stop: () => socket.destroy() };
}
