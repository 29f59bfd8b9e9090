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

/**
 * A plain socket in MONITOR mode on `port`: `commands` collects the commands clients send (not those scripts run),
 * each as its decoded arguments, in the order Redis ran them.
 */
export async function monitorRedis(port: number): Promise<{ commands: string[][]; stop(): void }> {
  const socket = net.connect(port, '127.0.0.1');
  // MONITOR lines are ASCII: every other byte is printed as `\xHH`.
  socket.setEncoding('latin1');
  const commands: string[][] = [];
  let buf = '';
  socket.on('data', (chunk: string) => {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf('\r\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      const m = /^\+\S+ \[\d+ (\S+)\] (.*)$/.exec(line);
      if (m && m[1] !== 'lua') commands.push(monitorArgs(m[2]!));
    }
  });
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  socket.write('MONITOR\r\n');
  await new Promise<void>((resolve) => socket.once('data', () => resolve()));
  return { commands, stop: () => socket.destroy() };
}
