import type { StoredEvent } from '../store/store.js';
import type { EventType } from './schemas.js';

/** What clients receive for each event (spec §4). `revision` is null for events that changed no session field. */
export interface EventEnvelope {
  id: string;
  session_id: string;
  type: EventType;
  at: string;
  revision: number | null;
  data: unknown;
}

/** The last time formatted: the events of one write share their `at`, so most lookups hit. */
let lastMs = NaN;
let lastIso = '';

const iso = (ev: StoredEvent) => {
  const ms = Number.isFinite(ev.at) && ev.at > 0 ? ev.at : Number(ev.id.slice(0, ev.id.indexOf('-')));
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString();
    lastMs = ms;
  }
  return lastIso;
};

/** The envelope as an object (data parsed): for code that inspects events. The wire uses `OutEvent`. */
export function envelope(sessionId: string, ev: StoredEvent): EventEnvelope {
  return {
    id: ev.id,
    session_id: sessionId,
    // The log holds only types the service writes (its schemas, src/events/schemas.ts, check the pages sent).
    type: ev.type as EventType,
    at: iso(ev),
    revision: ev.revision > 0 ? ev.revision : null,
    data: JSON.parse(ev.data || 'null'),
  };
}

/**
 * An event ready to send, built once per event per process and shared by every client of the session in this
 * process: the envelope's JSON text, and (lazily, once) the bytes of its WebSocket text frame and SSE record.
 *
 * The JSON text is spliced around the stored data, which is already JSON (every writer stores JSON.stringify
 * output or a concatenation of such): no JSON.parse/JSON.stringify round trip of the data at all, even for a
 * 100 kB `turn.completed`. It equals `JSON.stringify(envelope(sessionId, ev))` (tested).
 */
export class OutEvent {
  readonly id: string;
  readonly type: string;
  readonly json: string;
  private wsBytes: Buffer | undefined;
  private wire: Buffer | undefined;
  private sseBytes: Buffer | undefined;

  constructor(sessionId: string, ev: StoredEvent) {
    this.id = ev.id;
    this.type = ev.type;
    this.json =
      `{"id":"${ev.id}","session_id":${JSON.stringify(sessionId)},"type":${JSON.stringify(ev.type)},` +
      `"at":"${iso(ev)}","revision":${ev.revision > 0 ? ev.revision : 'null'},"data":${ev.data || 'null'}}`;
  }

  /**
   * The UTF-8 payload of the WebSocket text frame (one Buffer for all sockets: ws does not copy it), a view of the
   * whole frame's memory (see wsWire).
   */
  wsFrame(): Buffer {
    if (!this.wsBytes) this.wsWire();
    return this.wsBytes!;
  }

  /**
   * The whole WebSocket text frame as a server sends it (RFC 6455 §5.2: FIN, opcode 1, unmasked, then the payload),
   * built once and written as is to every client's socket: one write per client instead of ws framing it again
   * (a header allocated and two writes per client). Only for connections without extensions (see routes/stream.ts).
   */
  wsWire(): Buffer {
    if (this.wire) return this.wire;
    const n = Buffer.byteLength(this.json);
    const head = n < 126 ? 2 : n < 65_536 ? 4 : 10;
    const out = Buffer.allocUnsafe(head + n);
    out[0] = 0x81;
    if (n < 126) {
      out[1] = n;
    } else if (n < 65_536) {
      out[1] = 126;
      out.writeUInt16BE(n, 2);
    } else {
      out[1] = 127;
      out.writeUInt32BE(Math.floor(n / 2 ** 32), 2);
      out.writeUInt32BE(n >>> 0, 6);
    }
    out.write(this.json, head, 'utf8');
    // The payload alone is a view of the same memory (one encoding, one allocation per event).
    this.wsBytes = out.subarray(head);
    return (this.wire = out);
  }

  /** The SSE record: `id`, `event` (the type) and the envelope as `data`. */
  sseRecord(): Buffer {
    return (this.sseBytes ??= Buffer.from(`id: ${this.id}\nevent: ${this.type}\n${sseData(this.json)}\n`));
  }

  get byteLength(): number {
    return this.wsFrame().byteLength;
  }
}

/** `data:` lines of an SSE record (a line break inside the text, legal JSON whitespace, starts another line). */
export function sseData(text: string): string {
  return /[\r\n]/.test(text)
    ? text
        .split(/\r\n|\r|\n/)
        .map((l) => `data: ${l}\n`)
        .join('')
    : `data: ${text}\n`;
}
