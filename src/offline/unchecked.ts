/** Reading JSON whose fields are not checked yet, without casts. */

/** A JSON object whose named fields are not checked yet. */
export type Unchecked<K extends string> = { readonly [P in K]?: unknown };

/** `value` as an object whose fields `K` are still to check, or undefined when it is not a (non-array) object. */
export function unchecked<K extends string>(value: unknown): Unchecked<K> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? value : undefined;
}
