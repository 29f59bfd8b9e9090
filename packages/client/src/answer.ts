import { ConnectionError, errorOf } from './errors.js';

/**
 * What the client's methods make of an answer: the body of a 2xx that is the API's JSON, the ApiError of any other
 * status, and a ConnectionError for a 2xx that is not the API (a proxy's or captive portal's HTML page, a body cut
 * short, a wrong content type, JSON of another shape). Every route a method wraps answers a JSON object sent as
 * `application/json`, so anything else did not come from the API.
 */

/** An openapi-fetch answer. */
interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/**
 * What a method's 2xx body must be: a JSON object; a session (`object: "session"`, its id, status and revision,
 * which `waitFor` reads); a page (`data` a list).
 */
type Shape = 'object' | 'session' | 'page';

/** `application/json`, or a `+json` type, with any parameters. */
const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

/** Whether a content type is JSON's; an absent one may be (the body decides). */
export const isJsonType = (type: string | null) => type === null || JSON_TYPE.test(type);

export function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function fits(data: unknown, shape: Shape): boolean {
  if (!isObject(data)) return false;
  if (shape === 'session') {
    return (
      data['object'] === 'session' &&
      typeof data['id'] === 'string' &&
      typeof data['status'] === 'string' &&
      typeof data['revision'] === 'number'
    );
  }
  return shape === 'page' ? Array.isArray(data['data']) : true;
}

/** The first characters of a body, for a message. */
const excerpt = (x: unknown) => {
  const s = JSON.stringify(x) ?? String(x);
  return s.length > 80 ? `${s.slice(0, 80)}…` : s;
};

export async function unwrap<T>(p: Promise<Answer<T>>, shape: Shape = 'object'): Promise<T> {
  let answer: Answer<T>;
  try {
    answer = await p;
  } catch (err) {
    // openapi-fetch parses a 2xx body itself (JSON.parse, Response.json) and throws what the parse threw: a
    // SyntaxError is a body that is not JSON (an HTML page, a body cut short). (An error answer's body is parsed
    // leniently, and a failed request is already a ConnectionError of the retrying fetch.)
    if (err instanceof SyntaxError) {
      throw new ConnectionError(`the service answered a body that is not JSON: ${err.message}`, {
        cause: err,
      });
    }
    throw err;
  }
  const { data, error, response } = answer;
  if (!response.ok) {
    // openapi-fetch has read the body already; build the error from a copy of what it parsed.
    throw await errorOf(
      new Response(JSON.stringify(error ?? null), { status: response.status, headers: response.headers }),
    );
  }
  const what = `${response.url}: a ${response.status} answer`;
  const type = response.headers.get('content-type');
  // Without a content type the body decides; with another one it is not the API's, however it parses.
  if (!isJsonType(type)) {
    throw new ConnectionError(`${what} of type ${type}, not the API's JSON`);
  }
  if (data === undefined) throw new ConnectionError(`${what} without a body`);
  if (!fits(data, shape)) {
    throw new ConnectionError(
      `${what} that is not ${shape === 'object' ? 'an object' : `a ${shape}`}: ${excerpt(data)}`,
    );
  }
  return data;
}
