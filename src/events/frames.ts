import { z } from 'zod';
import type { FastifyBaseLogger } from 'fastify';
import { DomainError, FencedOut, zodDetails, type ErrorCode } from '../errors.js';
import {
  DEFAULT_JSON_MAX_DEPTH,
  DEFAULT_JSON_MAX_KEYS,
  forbiddenKeyDetails,
  forbiddenKeyPath,
  jsonScan,
  tooDeepMessage,
  tooWideMessage,
} from '../json-depth.js';
import { loneSurrogateDetails, loneSurrogateMessage, loneSurrogatePath } from '../json-unicode.js';
import { decisionBody, postMessageBody, toolResultFields } from '../schemas.js';
import { errorResultHasContent } from '../message-schemas.js';
import { cancelRun } from '../sessions/control.js';
import { addMessage } from '../sessions/messages.js';
import type { MutationResult, SessionDeps } from '../sessions/mutate.js';
import { decide, putResult } from '../sessions/tool-calls.js';
import { actorOf, requireScope } from '../plugins/auth.js';
import type { ClientScope, ClientTokenRecord } from '../store/client-tokens.js';

/**
 * Frames a WebSocket client may send (spec §5). Each frame is `{type, ref, …}` where `…` is exactly the body of the
 * matching REST route, validated by the same zod schema and run by the same operation (src/sessions/*.ts):
 *
 * | frame                                                   | REST route                                   |
 * |---------------------------------------------------------|----------------------------------------------|
 * | `{type:'message', ref, content | text, interrupt?}`     | POST /v1/sessions/:id/messages               |
 * | `{type:'tool_result', ref, tool_use_id, content, is_error?}` | PUT /v1/sessions/:id/tool-results/:tool_use_id |
 * | `{type:'tool_call.decide', ref, tool_use_id, decision, input?, reason?}` | POST /v1/sessions/:id/tool-calls/:tool_use_id |
 * | `{type:'cancel', ref}`                                  | POST /v1/sessions/:id/cancel                 |
 *
 * Any frame may carry `if_match: <revision>` (the REST routes' `If-Match`). Answers: `{type:'ack', ref, revision,
 * status}` or `{type:'error', ref, error:{code, message, details?}}` with the REST routes' codes. On a connection
 * opened with a client token, each frame needs the scope of its REST route (`scope_denied` otherwise).
 */
const head = z.looseObject({
  type: z.enum(['message', 'tool_result', 'tool_call.decide', 'cancel']),
  ref: z.string().min(1).max(200),
  if_match: z.number().int().min(0).optional(),
});
const toolUseId = z.string().min(1).max(128);
const toolResultFrame = toolResultFields.extend({ tool_use_id: toolUseId }).refine(...errorResultHasContent);
const decideFrame = decisionBody.extend({ tool_use_id: toolUseId });
const cancelFrame = z.strictObject({});

/** The client-token scope each frame needs: its REST route's. */
const FRAME_SCOPES: Record<z.infer<typeof head>['type'], ClientScope> = {
  message: 'message',
  tool_result: 'results',
  'tool_call.decide': 'decide',
  cancel: 'cancel',
};

export type ServerFrame =
  | { type: 'ack'; ref: string; revision: number; status: string }
  | { type: 'error'; ref: string | null; error: { code: ErrorCode; message: string; details?: unknown } };

const errorFrame = (
  ref: string | null,
  code: ErrorCode,
  message: string,
  details?: unknown,
): ServerFrame => ({
  type: 'error',
  ref,
  error: details === undefined ? { code, message } : { code, message, details },
});

/** The REST routes' `details` shape: JSON-pointer paths into the frame. */
const frameDetails = (err: z.ZodError) => zodDetails(err.issues);

/** Runs one client frame for `tenant` on session `id`; never throws. */
export async function handleFrame(
  raw: string,
  ctx: {
    tenant: string;
    sessionId: string;
    /** What the operations on sessions need (src/sessions/*.ts). */
    deps: SessionDeps;
    log: FastifyBaseLogger;
    /** The client token the connection was opened with (null: a tenant key). */
    token?: ClientTokenRecord | null;
    /** Counts a frame that changes something against its client token's rate; throws 429 `rate_limited` past it. */
    admit?: () => Promise<void>;
  },
): Promise<ServerFrame> {
  let msg: unknown;
  const bytes = Buffer.from(raw);
  const { breach, suspectKeys } = jsonScan(bytes, DEFAULT_JSON_MAX_DEPTH, DEFAULT_JSON_MAX_KEYS);
  if (breach === 'depth') return errorFrame(null, 'invalid_request', tooDeepMessage(DEFAULT_JSON_MAX_DEPTH));
  if (breach === 'keys') return errorFrame(null, 'invalid_request', tooWideMessage(DEFAULT_JSON_MAX_KEYS));
  try {
    msg = JSON.parse(raw);
  } catch {
    return errorFrame(null, 'invalid_frame', 'The frame is not valid JSON.');
  }
  // As REST bodies (app.ts): a prototype key is refused with its path.
  const forbidden = suspectKeys ? forbiddenKeyPath(msg) : null;
  if (forbidden !== null)
    return errorFrame(
      null,
      'invalid_request',
      'The frame holds a forbidden key.',
      forbiddenKeyDetails(forbidden),
    );
  const illFormed = loneSurrogatePath(bytes, msg);
  if (illFormed !== null)
    return errorFrame(null, 'invalid_request', loneSurrogateMessage, loneSurrogateDetails(illFormed));
  if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) {
    return errorFrame(null, 'invalid_frame', 'A frame is a JSON object with `type` and `ref`.');
  }
  const rawRef: unknown = 'ref' in msg ? msg.ref : undefined;
  const ref = typeof rawRef === 'string' && rawRef.length >= 1 && rawRef.length <= 200 ? rawRef : null;
  const h = head.safeParse(msg);
  if (!h.success) return errorFrame(ref, 'invalid_request', 'The frame is invalid.', frameDetails(h.error));
  const { type, ref: _r, if_match: ifMatch, ...body } = h.data;
  const { tenant, sessionId: id, deps } = ctx;
  const token = ctx.token ?? null;
  const by = actorOf(token);
  try {
    requireScope(token, FRAME_SCOPES[type]);
    await ctx.admit?.();
    let res: MutationResult;
    switch (type) {
      case 'message':
        res = await addMessage(deps, tenant, id, postMessageBody.parse(body), ifMatch, by);
        break;
      case 'tool_result': {
        const { tool_use_id, ...rest } = toolResultFrame.parse(body);
        res = await putResult(deps, tenant, id, tool_use_id, rest, ifMatch);
        break;
      }
      case 'tool_call.decide': {
        const { tool_use_id, ...rest } = decideFrame.parse(body);
        res = await decide(deps, tenant, id, tool_use_id, rest, ifMatch, by);
        break;
      }
      case 'cancel':
        cancelFrame.parse(body);
        res = await cancelRun(deps, tenant, id, ifMatch);
        break;
    }
    return { type: 'ack', ref: h.data.ref, revision: res.state.revision, status: res.state.status };
  } catch (err) {
    if (err instanceof z.ZodError) {
      return errorFrame(h.data.ref, 'invalid_request', 'The frame is invalid.', frameDetails(err));
    }
    // A domain error is answered with its code (a store outage too: `store_unavailable`). A lost lease is not the
    // frame's fault: a bug of ours, answered as one (below).
    if (err instanceof DomainError && !(err instanceof FencedOut))
      return errorFrame(h.data.ref, err.code, err.message, err.details);
    ctx.log.error({ err, session: id }, 'websocket frame failed');
    return errorFrame(h.data.ref, 'internal_error', 'Something went wrong on our side.');
  }
}
