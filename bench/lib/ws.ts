/** WebSocket clients of the service's `GET /v1/sessions/:id/stream` (spec §5). */
import WebSocket from 'ws';
import { nowMs, sleep, withTimeout, http } from './util.js';

export interface Envelope {
  id: string;
  session_id: string;
  type: string;
  at: string;
  data: any;
}

export function streamUrl(base: string, id: string, after?: string): string {
  const u = new URL(`/v1/sessions/${id}/stream`, base.replace(/^http/, 'ws'));
  if (after) u.searchParams.set('after', after);
  return u.toString();
}

const early = new WeakMap<WebSocket, { frames: string[]; onFrame: (frame: string) => void }>();

/**
 * Opens a WebSocket; rejects on an HTTP error (e.g. 404 while the route does not exist) or after `timeoutMs`.
 * Frames that arrive before the caller listens (the server may send them in the same packet as the handshake,
 * before the `await` resumes) are kept for `listen`.
 */
export function openWs(url: string, timeoutMs = 10_000): Promise<WebSocket> {
  return withTimeout(
    new Promise<WebSocket>((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false });
      const buf = { frames: [] as string[], onFrame: (frame: string) => void buf.frames.push(frame) };
      early.set(ws, buf);
      ws.on('message', (raw) => buf.onFrame(raw.toString()));
      ws.once('open', () => {
        ws.off('error', reject);
        resolve(ws);
      });
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) =>
        reject(new Error(`WebSocket upgrade answered ${res.statusCode}`)),
      );
    }),
    timeoutMs,
    `WebSocket ${url}`,
  );
}

/** Delivers every text frame of `ws` to `onFrame`, starting with those that arrived before this call. */
export function listen(ws: WebSocket, onFrame: (frame: string) => void): void {
  const buf = early.get(ws);
  if (!buf) {
    ws.on('message', (raw) => onFrame(raw.toString()));
    return;
  }
  const pending = buf.frames;
  buf.frames = [];
  buf.onFrame = onFrame;
  for (const f of pending) onFrame(f);
}

/** Stops delivering frames (they are dropped). */
export function unlisten(ws: WebSocket): void {
  const buf = early.get(ws);
  if (buf) buf.onFrame = () => {};
  else ws.removeAllListeners('message');
}

/** Whether the service serves the WebSocket stream route: an upgrade on a session that exists. */
export async function wsRouteAvailable(base: string): Promise<boolean> {
  const created = await http('POST', `${base}/v1/sessions`, { start: false });
  if (created.status !== 201) return false;
  try {
    const ws = await openWs(streamUrl(base, created.body.id), 5000);
    ws.close();
    return true;
  } catch {
    return false;
  } finally {
    await http('DELETE', `${base}/v1/sessions/${created.body.id}`);
  }
}

export interface FollowOptions {
  after?: string | undefined;
  /** Called for each event with its receipt time (ms, wall clock). Return true to stop following. */
  onEvent(ev: Envelope, at: number): boolean | void;
  timeoutMs: number;
  /** Already open socket to use (e.g. opened before the run was started). */
  ws?: WebSocket;
  /**
   * Only events of these types are parsed and passed to `onEvent`; the others are counted only. The bench's
   * clients share the machine's cores with the service, so a client that needs only the status skips the parse.
   */
  types?: readonly string[];
}

const TYPE_KEY = '"type":"';

/** The envelope's `type` without parsing the frame: it follows `id` and `session_id`, which cannot hold quotes. */
export function frameType(raw: string): string {
  const at = raw.indexOf(TYPE_KEY);
  if (at < 0) return '';
  const from = at + TYPE_KEY.length;
  return raw.slice(from, raw.indexOf('"', from));
}

/** Follows a session's events until `onEvent` returns true; resolves with the count of events seen. */
export async function follow(base: string, id: string, opts: FollowOptions): Promise<number> {
  const ws = opts.ws ?? (await openWs(streamUrl(base, id, opts.after), opts.timeoutMs));
  let count = 0;
  let last = '';
  try {
    return await withTimeout(
      new Promise<number>((resolve, reject) => {
        listen(ws, (raw) => {
          const at = nowMs();
          count++;
          if (opts.types && !opts.types.includes(frameType(raw))) return;
          const ev = JSON.parse(raw) as Envelope;
          last = `${ev.type}${ev.type === 'session.status' ? `:${ev.data?.status}` : ''}`;
          try {
            if (opts.onEvent(ev, at)) resolve(count);
          } catch (err) {
            reject(err);
          }
        });
        ws.once('close', (code, reason) =>
          reject(new Error(`stream of ${id} closed (${code} ${reason.toString()}) after ${count} events`)),
        );
        ws.once('error', reject);
      }),
      opts.timeoutMs,
      `following session ${id}`,
    ).catch((err: Error) => {
      throw new Error(`${err.message} (${count} events, the last ${last || 'none'})`);
    });
  } finally {
    unlisten(ws);
    ws.removeAllListeners('close');
    ws.on('error', () => {});
    ws.terminate();
  }
}

/** `onEvent` for "until the run that starts now ends": a `session.status` idle/failed after a running one. */
export function untilRunEnds(onEach?: (ev: Envelope, at: number) => void) {
  let running = false;
  return (ev: Envelope, at: number): boolean => {
    onEach?.(ev, at);
    if (ev.type !== 'session.status') return false;
    const status = ev.data?.status;
    if (status === 'running') running = true;
    if (status === 'failed') throw new Error(`session failed: ${JSON.stringify(ev.data?.error)}`);
    return running && (status === 'idle' || status === 'requires_action');
  };
}

/** Fallback while the WebSocket route is missing: polls `GET /v1/sessions/:id` until the run ends. */
export async function pollUntilIdle(base: string, id: string, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const r = await http('GET', `${base}/v1/sessions/${id}`);
    if (r.status === 200 && r.body.status !== 'running') {
      if (r.body.status === 'failed') throw new Error(`session failed: ${JSON.stringify(r.body.error)}`);
      return nowMs();
    }
    await sleep(5);
  }
  throw new Error(`timed out polling session ${id}`);
}
