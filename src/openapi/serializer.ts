import type { FastifySerializerCompiler } from 'fastify';
import { ResponseSerializationError } from 'fastify-type-provider-zod';
import type { z } from 'zod';

type Schema = z.ZodType | { properties: z.ZodType };

/**
 * Serializes responses that have a schema: checks the body against the route's zod response schema (so the OpenAPI
 * document, built from the same schemas, says what is sent), then sends the body as it is. Unlike the zod type
 * provider's own serializer it never strips fields the schema does not name: a field added to a resource reaches
 * clients before the schema mentions it. A body that does not match is a bug of the service: a 500 whose cause
 * (the zod issues) is in the log.
 *
 * The check costs CPU in proportion to the body (a 2 MB history is ~100 ms of zod on the event loop, at every
 * read): bodies over `checkMaxBytes` of JSON are sent unchecked. Everything the service answers was validated when
 * it was written (or built by the service itself), so the check only catches drift between code and schema: the
 * tests keep it on for every body (the default outside NODE_ENV=production, see RESPONSE_CHECK_MAX_BYTES).
 */
/**
 * Bodies whose JSON text a route already made (`withText`): the serializer sends that text instead of stringifying
 * the body again (a list page of 400 kB sessions is stringified once per session to measure the page; a second
 * stringify of the whole page was ~5 ms of event loop per page). Weak: an entry goes with its body.
 */
const texts = new WeakMap<object, string>();

/** `body`, whose JSON text is `text` (exactly `JSON.stringify(body)`), for the serializer to send as it is. */
export function withText<T extends object>(body: T, text: string): T {
  texts.set(body, text);
  return body;
}

export const checkedSerializer =
  (checkMaxBytes: number): FastifySerializerCompiler<Schema> =>
  ({ schema, method, url }) =>
  (data) => {
    const given = typeof data === 'object' && data !== null ? texts.get(data) : undefined;
    const text = given ?? JSON.stringify(data);
    if (text.length > checkMaxBytes) return text;
    const zod = 'properties' in schema ? schema.properties : schema;
    const checked = zod.safeParse(data);
    if (!checked.success) throw new ResponseSerializationError(method, url, { cause: checked.error });
    // A checked body's given text is checked too: it must be the body's own JSON.
    if (given !== undefined && given !== JSON.stringify(data))
      throw new Error(`${method} ${url}: the given JSON text is not the body's`);
    return text;
  };
