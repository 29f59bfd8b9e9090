import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { isIP } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { hostOf, parseWebhookUrl, resolveChecked } from './address-guard.js';

/**
 * One delivery attempt: the event envelope POSTed to the endpoint, signed per Standard Webhooks by the
 * `standardwebhooks` package (`webhook-id`, `webhook-timestamp`, `webhook-signature`), within `timeoutMs` from
 * resolving the host to the end of the answer's headers. The host's addresses are checked at this moment and the
 * socket connects to a checked one (see address-guard.ts). Redirects are not followed; any 2xx is success.
 *
 * The deadline stays armed until the answer's body ends: a receiver that answers and then trickles its body is cut
 * (its socket destroyed) at `timeoutMs`, and a body over MAX_ANSWER_BYTES is cut at once. Each webhook has its own
 * keep-alive agents with at most AGENT_MAX_SOCKETS sockets per origin, idle sockets closed after AGENT_IDLE_MS, and
 * dropped (every socket destroyed) when the webhook is deleted or its URL changes (`releaseAgents`).
 */

export interface AttemptResult {
  ok: boolean;
  statusCode: number | null;
  error: string | null;
  durationMs: number;
}

/** Sockets one webhook may hold per origin (attempts beyond it wait for a socket, within their deadline). */
export const AGENT_MAX_SOCKETS = 8;
/** A kept-alive socket unused this long is closed. */
export const AGENT_IDLE_MS = 5_000;

interface Agents {
  http: http.Agent;
  https: https.Agent;
}

const byWebhook = new Map<string, Agents>();

function agentsOf(webhookId: string): Agents {
  let a = byWebhook.get(webhookId);
  if (!a) {
    const opts = {
      keepAlive: true,
      maxSockets: AGENT_MAX_SOCKETS,
      maxFreeSockets: AGENT_MAX_SOCKETS,
      timeout: AGENT_IDLE_MS,
    };
    a = { http: new http.Agent(opts), https: new https.Agent(opts) };
    byWebhook.set(webhookId, a);
  }
  return a;
}

/** Destroys the webhook's sockets (on delete, or when its URL changes); the next attempt opens new ones. */
export function releaseAgents(webhookId: string): void {
  const a = byWebhook.get(webhookId);
  if (!a) return;
  byWebhook.delete(webhookId);
  a.http.destroy();
  a.https.destroy();
}

export function closeAgents(): void {
  for (const id of [...byWebhook.keys()]) releaseAgents(id);
}

/** The answer body read at most (then dropped): an endpoint cannot make us buffer. */
const MAX_ANSWER_BYTES = 64 * 1024;

export async function attempt(opts: {
  webhookId: string;
  url: string;
  secret: string;
  msgId: string;
  body: string;
  timeoutMs: number;
  allowPrivate: boolean;
}): Promise<AttemptResult> {
  const started = performance.now();
  const done = (ok: boolean, statusCode: number | null, error: string | null): AttemptResult => ({
    ok,
    statusCode,
    error,
    durationMs: Math.round(performance.now() - started),
  });
  const signal = AbortSignal.timeout(opts.timeoutMs);
  let url: URL;
  let checked: Awaited<ReturnType<typeof resolveChecked>>;
  try {
    url = parseWebhookUrl(opts.url);
    // A resolver that does not answer cannot hold the attempt past its timeout (the lookup itself cannot be aborted).
    const timedOut = new Promise<null>((resolve) => signal.addEventListener('abort', () => resolve(null)));
    const found = await Promise.race([resolveChecked(hostOf(url), opts.allowPrivate), timedOut]);
    if (!found) return done(false, null, 'timeout');
    checked = found;
  } catch (err) {
    return done(false, null, `refused: ${err instanceof Error ? err.message : String(err)}`);
  }
  const now = new Date();
  const signature = new Webhook(opts.secret).sign(opts.msgId, now, opts.body);
  // The checked addresses are the only ones the socket may connect to (node asks `lookup` for a name, never for an
  // IP literal, which resolveChecked already checked).
  const lookup: LookupFunction = (_host, options, cb) => {
    if (options.all) cb(null, checked);
    else cb(null, checked[0]!.address, checked[0]!.family);
  };
  const isTls = url.protocol === 'https:';
  return new Promise<AttemptResult>((resolve) => {
    let settled = false;
    const finish = (r: AttemptResult) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      resolve(r);
    };
    // Set once the headers are in: the outcome, reported when the body ends (or is cut by the deadline).
    let outcome: AttemptResult | undefined;
    const req = (isTls ? https : http).request(
      url,
      {
        method: 'POST',
        agent: isTls ? agentsOf(opts.webhookId).https : agentsOf(opts.webhookId).http,
        ...(isIP(hostOf(url)) ? {} : { lookup }),
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(opts.body),
          'user-agent': 'toolrunner-sessions-webhooks/1',
          'webhook-id': opts.msgId,
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': signature,
        },
      },
      (res) => {
        const status = res.statusCode ?? 0;
        let read = 0;
        const ok = status >= 200 && status < 300;
        outcome = done(ok, status, ok ? null : `HTTP ${status}`);
        const settle = () => finish(outcome!);
        res.on('data', (chunk: Buffer) => {
          read += chunk.length;
          if (read > MAX_ANSWER_BYTES) {
            res.destroy();
            settle();
          }
        });
        res.on('end', settle);
        res.on('error', settle);
        res.on('close', settle);
        res.resume();
      },
    );
    const onAbort = () => {
      // Before the headers, or while the body trickles: the socket is destroyed either way (never kept alive).
      req.destroy();
      finish(outcome ?? done(false, null, 'timeout'));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    req.on('error', (err: NodeJS.ErrnoException) =>
      finish(outcome ?? done(false, null, err.code ?? err.message)),
    );
    req.end(opts.body);
  });
}
