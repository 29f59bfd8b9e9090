/**
 * One call of an http tool's URL (spec §7.1): the task POSTed as JSON, signed per Standard Webhooks with the tool's
 * secret (the `standardwebhooks` package, as webhooks are), to an address the SSRF guard checked at this moment
 * (src/webhooks/address-guard.ts, the socket pinned to it). The deadline holds until the answer's body has ended,
 * and the body is read up to `maxBytes`; no keep-alive socket outlives the call.
 */
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { hostOf, parseWebhookUrl, resolveChecked } from '../webhooks/address-guard.js';

type HttpCallOutcome =
  | { kind: 'answer'; status: number; body: string }
  | { kind: 'too_large' }
  | { kind: 'failed'; error: string }
  /** `stop` aborted the try (its call is no longer this try's to answer): the socket is closed, nothing read. */
  | { kind: 'stopped' };

export async function callToolUrl(o: {
  url: string;
  secret: string;
  /** The `webhook-id`: the call's, the same on every attempt. */
  msgId: string;
  body: string;
  timeoutMs: number;
  maxBytes: number;
  allowPrivate: boolean;
  /** Aborts the try before its deadline (the call was cancelled, or is another try's now): `stopped`. */
  stop?: AbortSignal;
}): Promise<HttpCallOutcome> {
  const timeout = AbortSignal.timeout(o.timeoutMs);
  const signal = o.stop ? AbortSignal.any([timeout, o.stop]) : timeout;
  const ended = (): HttpCallOutcome =>
    o.stop?.aborted ? { kind: 'stopped' } : { kind: 'failed', error: `timeout after ${o.timeoutMs} ms` };
  let url: URL;
  let checked: Awaited<ReturnType<typeof resolveChecked>>;
  try {
    url = parseWebhookUrl(o.url);
    if (signal.aborted) return ended();
    const timedOut = new Promise<null>((resolve) => signal.addEventListener('abort', () => resolve(null)));
    const found = await Promise.race([resolveChecked(hostOf(url), o.allowPrivate), timedOut]);
    if (!found) return ended();
    checked = found;
  } catch (err) {
    return { kind: 'failed', error: `refused: ${err instanceof Error ? err.message : String(err)}` };
  }
  const now = new Date();
  const signature = new Webhook(o.secret).sign(o.msgId, now, o.body);
  const lookup: LookupFunction = (_host, options, cb) => {
    if (options.all) cb(null, checked);
    else cb(null, checked[0]!.address, checked[0]!.family);
  };
  const isTls = url.protocol === 'https:';
  return new Promise<HttpCallOutcome>((resolve) => {
    let settled = false;
    const finish = (r: HttpCallOutcome) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      resolve(r);
    };
    const req = (isTls ? https : http).request(
      url,
      {
        method: 'POST',
        agent: false,
        ...(isIP(hostOf(url)) ? {} : { lookup }),
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(o.body),
          'user-agent': 'toolrunner-sessions-tools/1',
          'webhook-id': o.msgId,
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': signature,
        },
      },
      (res) => {
        // A non-2xx is a failed try whatever it says (retried): its body (a proxy's error page, of any size) unread.
        const status = res.statusCode ?? 0;
        if (status < 200 || status > 299) {
          res.destroy();
          req.destroy();
          finish({ kind: 'answer', status, body: '' });
          return;
        }
        const chunks: Buffer[] = [];
        let read = 0;
        res.on('data', (chunk: Buffer) => {
          read += chunk.length;
          if (read > o.maxBytes) {
            res.destroy();
            req.destroy();
            finish({ kind: 'too_large' });
          } else chunks.push(chunk);
        });
        res.on('error', (err) => finish({ kind: 'failed', error: err.message }));
        res.on('end', () =>
          finish({
            kind: 'answer',
            status: res.statusCode ?? 0,
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
      },
    );
    const onAbort = () => {
      req.destroy();
      finish(ended());
    };
    req.on('error', (err: NodeJS.ErrnoException) =>
      finish({ kind: 'failed', error: err.code ?? err.message }),
    );
    // Aborted while the address was checked: the request is not sent.
    if (signal.aborted) {
      onAbort();
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    req.end(o.body);
  });
}
