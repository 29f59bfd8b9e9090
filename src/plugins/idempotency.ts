import type { FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { createHash, randomUUID } from 'node:crypto';
import { z } from 'zod';
import { zodDetails, DomainError, Conflict, InvalidRequest } from '../errors.js';
import {
  IN_FLIGHT_RENEW_MS,
  IdempotencyRecords,
  appliedToken,
  type IdempotencyRecord,
  type StreamReplay,
} from '../store/idempotency.js';
import type { SecretBox } from '../webhooks/secrets.js';
import { receiptOf, withoutAction } from '../sessions/view.js';
import { readsSession } from './auth.js';

declare module 'fastify' {
  interface FastifyRequest {
    idempotency?:
      | {
          key: string;
          fingerprint: string;
          /** The pending record's owner: this request (see `IdempotencyRecords.giveUp`). */
          owner: string;
          /**
           * What the request's mutation records with its change (`appliedToken`): a keyed create's id, a session's
           * applied tokens. A retry after a crash between the change and its answer's record finds it there.
           */
          token: string;
          sealed?: readonly string[];
          /** Renews the key's in-flight lease while the request runs; cleared before its answer is written. */
          renewal: NodeJS.Timeout;
        }
      | undefined;
    /** The same key and body as a streamed answer kept by `keepStreamed`: the route streams it again from here. */
    streamReplay?: StreamReplay | undefined;
  }
  interface FastifyContextConfig {
    /**
     * The route honours `Idempotency-Key` though it is no POST (every POST of the scope does): a PUT whose answer
     * shows a secret once (`PUT /v1/tools/:name`, an http runner's), which a client whose answer was lost could not
     * get again otherwise. The OpenAPI document says so for it (src/openapi/document.ts).
     */
    idempotencyKey?: boolean;
  }
  interface FastifyInstance {
    /**
     * A streamed answer's record (it has no body to keep): where it streams from, so the same request streams it
     * again and changes nothing (POST /v1/chat). Called once its mutation is done, before the stream starts.
     */
    keepStreamed(req: FastifyRequest, replay: StreamReplay): Promise<void>;
  }
}

/**
 * Fields of this request's answer (top-level strings of its JSON body) that are secrets shown once, such as a new
 * webhook's signing secret: its idempotency record keeps them sealed with WEBHOOK_SECRET_KEY, apart from the body,
 * and a replay opens them again. Without an Idempotency-Key nothing is kept and this does nothing.
 */
export function sealInRecord(req: FastifyRequest, ...fields: string[]): void {
  if (req.idempotency) req.idempotency.sealed = fields;
}

const keyHeader = z.string().regex(/^[\x21-\x7e]{1,255}$/, 'printable ASCII, 1-255 characters');

type Json = Record<string, unknown>;

/** `body` without `fields`, and those fields sealed; the body as it is when it is not a JSON object. */
function sealFields(
  body: string,
  fields: readonly string[],
  box: SecretBox,
): Pick<IdempotencyRecord, 'body' | 'sealed'> {
  let obj: unknown;
  try {
    obj = JSON.parse(body);
  } catch {
    return { body };
  }
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) return { body };
  const rest: Json = { ...obj };
  const sealed: Record<string, string> = {};
  for (const f of fields) {
    const v = rest[f];
    if (typeof v !== 'string') continue;
    sealed[f] = box.seal(v);
    delete rest[f];
  }
  return { body: JSON.stringify(rest), sealed };
}

/**
 * `Idempotency-Key` on any POST of the scope it is registered in (the `/v1` scope), and on a route of another method
 * whose config says `idempotencyKey`: the first request's answer is kept in Redis for `ttlS` seconds (so it
 * holds across replicas); the same key with the same body gets that answer again, with another body 422
 * `idempotency_key_reused`, and while the first is still being handled 409 `idempotency_in_progress` (its key held
 * under a short lease its process renews, so a process that died frees the key: IN_FLIGHT_TTL_MS).
 * A client token's keys are its session's (every token of the session shares them, no other session sees them);
 * a tenant key's are the tenant's. A 5xx answer is not kept and frees the key at once (best effort), so the client may
 * try again. A keyed mutation records `token` in its own write, so a retry after a crash between the change and the
 * answer's record (the key freed by its lease) answers from what was done instead of doing it twice. Secrets in an answer (`sealInRecord`) are kept sealed with
 * `box` (as the webhooks keep them at rest) and opened for a replay; one that cannot be opened any more (the key
 * changed) is left out of the replay.
 */
export default fp<{ ttlS: number; maxBytesPerTenant: number; box: SecretBox }>(
  async (app, opts) => {
    const records = new IdempotencyRecords(app.redis, opts.ttlS, opts.maxBytesPerTenant);
    const keep = async (req: FastifyRequest, key: string, record: IdempotencyRecord) => {
      const forgotten = await records.keep(req.tenant, key, record);
      if (forgotten > 0)
        req.log.info(
          { tenant: req.tenant, forgotten },
          'idempotency answers forgotten: the tenant keeps IDEMPOTENCY_MAX_BYTES_PER_TENANT at most',
        );
    };
    app.addHook('preHandler', async (req, reply) => {
      const raw = req.headers['idempotency-key'];
      if ((req.method !== 'POST' && req.routeOptions.config.idempotencyKey !== true) || raw === undefined)
        return;
      const parsed = keyHeader.safeParse(raw);
      if (!parsed.success)
        throw new InvalidRequest(
          'invalid_request',
          'Invalid Idempotency-Key header.',
          zodDetails(parsed.error.issues, ['headers', 'idempotency-key']),
        );
      const fingerprint = createHash('sha256')
        // The route and its decoded params, not the raw URL: every spelling of one path is one request. No body,
        // `null` and `{}` are one request: the routes treat them alike.
        .update(
          `${req.method} ${req.routeOptions.url} ${JSON.stringify(req.params)}\n${JSON.stringify(req.body ?? {})}`,
        )
        .digest('base64url');
      // A client token's keys are its session's: a page chooses its keys without knowing the tenant's other
      // sessions, and must learn nothing of their requests (a shared key would answer it 422 or replay theirs).
      // The session id is joined with a newline, which no key holds: these never meet the tenant key's own keys.
      const scoped = req.clientToken ? `${req.clientToken.session_id}\n${parsed.data}` : parsed.data;
      const key = records.key(req.tenant, createHash('sha256').update(scoped).digest('base64url'));
      const owner = randomUUID();
      const pending: IdempotencyRecord = { state: 'pending', fp: fingerprint, owner };
      // A reservation that failed as Redis stopped answering may still land (a paused Redis runs it later): given
      // up at once, so the 503's retry is not held off by a lease nobody renews.
      const reserved = await records.reserve(key, pending).catch((err: unknown) => {
        records.giveUp(key, owner);
        throw err;
      });
      if (reserved) {
        const renewal = setInterval(() => void records.renew(key).catch(() => {}), IN_FLIGHT_RENEW_MS);
        renewal.unref();
        req.idempotency = { key, fingerprint, owner, token: appliedToken(key, fingerprint), renewal };
        return;
      }
      const stored = await records.get(key);
      if (!stored)
        throw new Conflict('idempotency_in_progress', 'A request with this Idempotency-Key is in progress.');
      if (stored.fp !== fingerprint) {
        throw new DomainError(
          'idempotency_key_reused',
          'This Idempotency-Key was used with another request.',
        );
      }
      if (stored.state === 'pending') {
        throw new Conflict('idempotency_in_progress', 'A request with this Idempotency-Key is in progress.');
      }
      if (stored.stream) {
        reply.header('idempotent-replayed', 'true');
        req.streamReplay = stored.stream;
        return;
      }
      reply.header('idempotent-replayed', 'true').header('content-type', 'application/json; charset=utf-8');
      if (stored.etag) reply.header('etag', stored.etag);
      const body = unsealed(stored, req, opts.box);
      return reply.code(stored.status ?? 200).send(readsSession(req.clientToken) ? body : receiptIn(body));
    });
    app.decorate('keepStreamed', async (req: FastifyRequest, replay: StreamReplay) => {
      const idem = req.idempotency;
      if (!idem) return;
      // A hijacked reply runs no onSend: the record is written here, and the key stops renewing. As in onSend, a
      // record that cannot be written does not fail the request (its change is made): the key frees itself.
      clearInterval(idem.renewal);
      delete req.idempotency;
      await keep(req, idem.key, { state: 'done', fp: idem.fingerprint, status: 200, stream: replay }).catch(
        (err: unknown) =>
          req.log.warn(
            { err },
            'an idempotent answer could not be kept; its key frees itself when its lease lapses',
          ),
      );
    });
    app.addHook('onSend', async (req, reply, payload) => {
      const idem = req.idempotency;
      if (!idem) return payload;
      clearInterval(idem.renewal);
      delete req.idempotency;
      if (reply.statusCode >= 500 || reply.statusCode === 429) {
        // Not kept: the key is free again at once for the client's retry (in the background while Redis does not
        // answer; the lease lapses otherwise). A change the request made anyway carries its token (see `token`).
        // A 429 is an answer for now (a rate, a quota, the tenant's unsent bytes replacing an answer already made):
        // the retry, once there is room, gets the real answer, never the refusal for a day.
        records.giveUp(idem.key, idem.owner);
        return payload;
      }
      const etag = reply.getHeader('etag');
      // A large answer reaches this hook as the write guard's stream of slices; its text is on the request.
      const body =
        typeof payload === 'string'
          ? payload
          : Buffer.isBuffer(payload)
            ? payload.toString('utf8')
            : (req.answerText ?? String(payload ?? ''));
      const stored: IdempotencyRecord = {
        state: 'done',
        fp: idem.fingerprint,
        status: reply.statusCode,
        ...(idem.sealed?.length ? sealFields(body, idem.sealed, opts.box) : { body }),
        ...(typeof etag === 'string' ? { etag } : {}),
      };
      // A record that cannot be written (Redis went away meanwhile) does not turn the answer into an error: the key
      // frees itself when its lease lapses, and the change carries its token, so the retry answers from it.
      await keep(req, idem.key, stored).catch((err: unknown) =>
        req.log.warn(
          { err },
          'an idempotent answer could not be kept; its key frees itself when its lease lapses',
        ),
      );
      return payload;
    });
    // A request that ends without an answer (the client went away) stops renewing: its key frees itself.
    const stopRenewing = async (req: FastifyRequest) => {
      if (req.idempotency) clearInterval(req.idempotency.renewal);
    };
    app.addHook('onResponse', stopRenewing);
    app.addHook('onRequestAbort', stopRenewing);
  },
  { name: 'idempotency', dependencies: ['redis', 'auth'] },
);

/**
 * A replayed answer as a client token without `read` may see it (spec §7.2): a session as its receipt, a refusal
 * without the pending calls (`details.required_action`). The key's first request may have been made by another token
 * of the same session, one holding `read` (the tokens of one session share their keys), whose answer showed them.
 * A body that is not JSON is sent as it is.
 */
function receiptIn(body: string | undefined): string | undefined {
  if (body === undefined) return body;
  let answer: unknown;
  try {
    answer = JSON.parse(body);
  } catch {
    return body;
  }
  if (isSessionAnswer(answer)) return JSON.stringify(receiptOf(answer));
  if (isErrorAnswer(answer) && answer.error.details !== undefined)
    return JSON.stringify({ error: { ...answer.error, details: withoutAction(answer.error.details) } });
  return body;
}

const isSessionAnswer = (x: unknown): x is Parameters<typeof receiptOf>[0] =>
  typeof x === 'object' && x !== null && 'object' in x && x.object === 'session';

const isErrorAnswer = (x: unknown): x is { error: { details?: unknown } } =>
  typeof x === 'object' && x !== null && 'error' in x && typeof x.error === 'object' && x.error !== null;

/** The kept body with its sealed fields opened and put back (last, where the routes put them). */
function unsealed(stored: IdempotencyRecord, req: FastifyRequest, box: SecretBox): string | undefined {
  if (!stored.sealed || stored.body === undefined) return stored.body;
  // Written by `sealFields` from a JSON object.
  const obj: Json = JSON.parse(stored.body);
  for (const [f, v] of Object.entries(stored.sealed)) {
    try {
      obj[f] = box.open(v);
    } catch (err) {
      req.log.warn({ err }, 'a sealed field of an idempotent answer cannot be opened; replayed without it');
    }
  }
  return JSON.stringify(obj);
}
