/**
 * The three wires the fake answers, each turned into the one first-party request `messages.ts` handles:
 *
 * - `anthropic`: `POST /v1/messages` (the API's own; `x-api-key` / `Authorization: Bearer`).
 * - `vertex`: `POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`
 *   (`:streamRawPredict` for SSE). The model is in the URL, not the body; the API version is the body's
 *   `anthropic_version` (no `anthropic-version` header); `stream` stays in the body. Google OAuth: a Bearer token.
 * - `bedrock`: `POST /model/{modelId}/invoke` (`/invoke-with-response-stream`). Neither `model` nor `stream` is in
 *   the body; `anthropic_version` and `anthropic_beta` (an array) are. Signed with SigV4 (`Authorization:
 *   AWS4-HMAC-SHA256 Credential=…/bedrock/aws4_request, SignedHeaders=…, Signature=…` and `x-amz-date`; the signature
 *   is not checked) or a Bedrock API key (`Authorization: Bearer`). A stream answers in the AWS event-stream framing:
 *   one binary frame (`:event-type chunk`) per SSE event, whose payload is `{"bytes": base64(the event's JSON)}`.
 *
 * What each SDK client sends was read from `@anthropic-ai/{bedrock,vertex}-sdk/src/client.ts` (`#adaptRequest`) and
 * what Bedrock's reader expects from `bedrock-sdk/src/core/streaming.ts`. Error bodies keep the API's envelope on
 * every wire (Bedrock's own are `{"message"}`): the SDK clients read the status, which is what the engine acts on.
 */
import { EventStreamCodec } from '@smithy/eventstream-codec';
import type http from 'node:http';
import type { ApiErrorSpec, WireName } from '../../src/offline/wire.js';

/** How a stream's SSE events go on the wire: as text, or one binary frame each. */
export interface StreamFraming {
  contentType: string;
  /** `events`: whole `event: …\ndata: …\n\n` strings, as `sse.ts` makes them. */
  encode(events: string[]): string | Uint8Array;
}

/** A request on any wire, as the first-party handler reads it. */
export interface Inbound {
  wire: WireName;
  /** The URL path it came on. */
  path: string;
  /** The body in the first-party shape (`model`, `stream`; no `anthropic_version`), or the raw text if not JSON. */
  raw: string;
  /** The body's size as received, in bytes. */
  bytes: number;
  /** The request's headers, with `anthropic-version` / `anthropic-beta` taken from the body on the cloud wires. */
  headers: http.IncomingHttpHeaders;
  /** What the wire itself refuses (its credentials, its body shape); answered once the request is recorded. */
  rejection?: ApiErrorSpec | undefined;
  framing: StreamFraming;
}

export interface WireRoute {
  wire: WireName;
  /** From the URL (cloud wires). */
  model?: string | undefined;
  /** Whether the URL asks for a stream (Bedrock; Vertex's body says it too). */
  stream?: boolean | undefined;
}

const VERTEX_PATH =
  /^\/v1\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/anthropic\/models\/([^/:]+):(rawPredict|streamRawPredict)$/;
const BEDROCK_PATH = /^\/model\/([^/]+)\/(invoke|invoke-with-response-stream)$/;

/** The wire a `POST` path belongs to, or `undefined` for none of the three. */
export function matchWire(method: string, path: string): WireRoute | undefined {
  if (method !== 'POST') return undefined;
  if (path === '/v1/messages') return { wire: 'anthropic' };
  const v = VERTEX_PATH.exec(path);
  // `models/count-tokens:rawPredict` is Vertex's token counter, which the fake does not serve (a 404).
  if (v && v[3] !== 'count-tokens')
    return { wire: 'vertex', model: decode(v[3]!), stream: v[4] === 'streamRawPredict' };
  const b = BEDROCK_PATH.exec(path);
  if (b) return { wire: 'bedrock', model: decode(b[1]!), stream: b[2] === 'invoke-with-response-stream' };
  return undefined;
}

function decode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

const sseFraming: StreamFraming = {
  contentType: 'text/event-stream; charset=utf-8',
  encode: (events) => events.join(''),
};

const codec = new EventStreamCodec(
  (bytes) => new TextDecoder().decode(bytes),
  (text) => new TextEncoder().encode(text),
);
const str = (value: string) => ({ type: 'string' as const, value });

/** Bedrock's framing: each SSE event's JSON as a base64 `bytes` chunk (what `eventStreamToSSEResponse` reads). */
const bedrockFraming: StreamFraming = {
  contentType: 'application/vnd.amazon.eventstream',
  encode(events) {
    const frames = events.map((event) => {
      // `sse.ts` writes each event as `event: <type>\ndata: <one-line JSON>\n\n`.
      const data = /\ndata: (.*)\n/.exec(event)?.[1] ?? '{}';
      const payload = JSON.stringify({ bytes: Buffer.from(data, 'utf8').toString('base64') });
      return codec.encode({
        headers: {
          ':event-type': str('chunk'),
          ':content-type': str('application/json'),
          ':message-type': str('event'),
        },
        body: new TextEncoder().encode(payload),
      });
    });
    return Buffer.concat(frames);
  },
};

const invalid = (message: string): ApiErrorSpec => ({ status: 400, type: 'invalid_request_error', message });

/** `raw` as received on `route`, in the first-party shape. */
export function inbound(
  route: WireRoute,
  path: string,
  raw: string,
  headers: http.IncomingHttpHeaders,
): Inbound {
  const bytes = Buffer.byteLength(raw);
  const base = { wire: route.wire, path, raw, bytes, headers };
  if (route.wire === 'anthropic') return { ...base, framing: sseFraming };
  const framing = route.wire === 'bedrock' ? bedrockFraming : sseFraming;
  const rejection = route.wire === 'bedrock' ? bedrockAuth(headers) : vertexAuth(headers);
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    return { ...base, rejection, framing }; // the handler answers the JSON error
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return { ...base, rejection, framing };
  const { anthropic_version: version, anthropic_beta: betas, ...fields } = body as Record<string, unknown>;
  const shape =
    'model' in fields
      ? invalid(`model: not allowed in the body on ${route.wire} (the model is in the URL)`)
      : route.wire === 'bedrock' && 'stream' in fields
        ? invalid('stream: not allowed in the body on bedrock (the URL says invoke-with-response-stream)')
        : typeof version !== 'string' || !version
          ? invalid('anthropic_version: Field required')
          : betas !== undefined && !(Array.isArray(betas) && betas.every((b) => typeof b === 'string'))
            ? invalid('anthropic_beta: Input should be a valid list of strings')
            : undefined;
  const canonical = { ...fields, model: route.model };
  if (route.wire === 'bedrock' && route.stream) Object.assign(canonical, { stream: true });
  const merged: http.IncomingHttpHeaders = { ...headers };
  if (typeof version === 'string') merged['anthropic-version'] = version;
  // Bedrock's client copies the header into the body and keeps the header; the body is what Bedrock reads.
  if (Array.isArray(betas)) merged['anthropic-beta'] = betas.join(',');
  return {
    ...base,
    raw: JSON.stringify(canonical),
    headers: merged,
    rejection: rejection ?? shape,
    framing,
  };
}

/** A SigV4 signature for the `bedrock` service, or a Bedrock API key; the signature itself is not verified. */
function bedrockAuth(headers: http.IncomingHttpHeaders): ApiErrorSpec | undefined {
  const auth = headers['authorization'] ?? '';
  if (/^Bearer \S+$/.test(auth)) return undefined;
  const sigv4 =
    /^AWS4-HMAC-SHA256 Credential=[^/\s]+\/\d{8}\/[a-z0-9-]+\/bedrock\/aws4_request, ?SignedHeaders=[a-z0-9;-]+, ?Signature=[0-9a-f]{64}$/;
  if (sigv4.test(auth) && typeof headers['x-amz-date'] === 'string') return undefined;
  return { status: 403, type: 'permission_error', message: 'Missing Authentication Token' };
}

/** A Google OAuth access token. */
function vertexAuth(headers: http.IncomingHttpHeaders): ApiErrorSpec | undefined {
  if (/^Bearer \S+$/.test(headers['authorization'] ?? '')) return undefined;
  return {
    status: 401,
    type: 'authentication_error',
    message: 'Request is missing required authentication credential.',
  };
}
