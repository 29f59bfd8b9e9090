/**
 * A type guard for a closed set of string values (a hash field such as a session's `status`): `v` is one of
 * `values`. The set is typed `unknown` once, here, so any value can be tested without a cast at the call site.
 */
export function oneOf<const T extends string>(values: readonly T[]): (v: unknown) => v is T {
  const set: ReadonlySet<unknown> = new Set<unknown>(values);
  return (v: unknown): v is T => set.has(v);
}
