import { z } from 'zod';

/** A canonical decimal integer: digits only, no sign, no leading zero (but `0` itself), at most 15 digits. */
const CANONICAL_INT = /^(?:0|[1-9][0-9]{0,14})$/;

const NOT_CANONICAL =
  'expected a decimal integer: digits only, without sign, leading zeros, spaces, exponent or 0x/0b prefix';

/** Canonical decimal text as its number; anything else as it is (a string the number schema refuses). */
const canonical = (v: unknown) => (typeof v === 'string' && CANONICAL_INT.test(v) ? Number(v) : v);

/**
 * An integer of a path or a query string (whose values are text): `min`..`max`, written in canonical decimal.
 * `z.coerce.number()` took whatever Number() reads (`01`, `0x10`, `0b1`, `1e2`, ` 1`, `+1`, ``): two spellings of
 * one page or one iteration, and text no client means as a number. Only canonical text becomes a number here; any
 * other text stays a string, which the number schema refuses (400 `invalid_request`). The OpenAPI document shows
 * the number schema (an `integer` with its bounds).
 */
export const intParam = (min: number, max: number = Number.MAX_SAFE_INTEGER) =>
  z.preprocess(canonical, z.number({ error: NOT_CANONICAL }).int().min(min).max(max));

/** intParam with `fallback` when absent (inside the preprocess, so the document's schema names its `default`). */
export const intQuery = (min: number, max: number, fallback: number) =>
  z.preprocess(canonical, z.number({ error: NOT_CANONICAL }).int().min(min).max(max).default(fallback));
