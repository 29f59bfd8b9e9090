/**
 * A real UDP nameserver on loopback for the resolver's tests: it answers the names it is given (A records; AAAA
 * queries get no record), never answers the names in `silent`, says SERVFAIL for those in `failing` and NXDOMAIN
 * for any other. Every question it got is in `asked`, in order.
 */
import dgram from 'node:dgram';
import { once } from 'node:events';

/** The query's question section ends after its name's labels and 4 bytes of type and class. */
function questionEnd(msg: Buffer): number {
  let at = 12;
  while (msg[at]! !== 0) at += msg[at]! + 1;
  return at + 5;
}

function questionName(msg: Buffer): string {
  const labels: string[] = [];
  for (let at = 12; msg[at]! !== 0; at += msg[at]! + 1)
    labels.push(msg.subarray(at + 1, at + 1 + msg[at]!).toString());
  return labels.join('.').toLowerCase();
}

/** An answer to `query`: `ipv4` as its one A record (none for other types), else the error `rcode`. */
function answer(query: Buffer, ipv4: string | null, rcode = 3): Buffer {
  const end = questionEnd(query);
  const type = query.readUInt16BE(end - 4);
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  // A response, recursion desired and available; its rcode (3 NXDOMAIN, 2 SERVFAIL) without an address.
  header.writeUInt16BE(ipv4 === null ? 0x8180 | rcode : 0x8180, 2);
  header.writeUInt16BE(1, 4);
  const records = ipv4 !== null && type === 1 ? 1 : 0;
  header.writeUInt16BE(records, 6);
  const question = query.subarray(12, end);
  if (!records) return Buffer.concat([header, question]);
  const record = Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...ipv4!.split('.').map(Number)]);
  return Buffer.concat([header, question, record]);
}

export interface DnsServer {
  /** `127.0.0.1:<port>`, as OUTBOUND_DNS_SERVERS takes it. */
  address: string;
  asked: string[];
  close(): void;
}

export async function startDnsServer(
  names: Record<string, string>,
  silent: string[] = [],
  failing: string[] = [],
): Promise<DnsServer> {
  const socket = dgram.createSocket('udp4');
  const asked: string[] = [];
  socket.on('message', (msg, from) => {
    const name = questionName(msg);
    asked.push(name);
    if (silent.includes(name)) return;
    socket.send(answer(msg, names[name] ?? null, failing.includes(name) ? 2 : 3), from.port, from.address);
  });
  socket.bind(0, '127.0.0.1');
  await once(socket, 'listening');
  return { address: `127.0.0.1:${socket.address().port}`, asked, close: () => socket.close() };
}
