/** What the spend durability suites (test/durability/durability-spend-kill, durability-delete-spend) share. */

/** What only a record of a turn's spend sends (src/cost/spend.ts `usageKey`): the proxy holds at it. */
export const RECORD = ':usage:';

/** Today's UTC day, as the tenant's day hashes and GET /v1/usage name it. */
export const today = () => new Date().toISOString().slice(0, 10);

/** A turn's token counts, as GET /v1/usage and the iteration records give them. */
export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

/** The fake's usage of turn `i`: distinct counts per turn, so a turn counted twice or lost shows in the sums. */
export const used = (i: number) => ({
  usage: {
    input_tokens: 1000 + i,
    output_tokens: 100 + i,
    cache_creation_input_tokens: 10 + i,
    cache_read_input_tokens: 20 + i,
  },
});
