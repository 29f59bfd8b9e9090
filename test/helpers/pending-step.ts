import type { PendingCall, PendingStep } from '../../src/store/pending.js';

const MB = 1_000_000;

/**
 * A step of 3 MB, for tests of what a read of a session copies: two calls approved with 1 MB edited inputs
 * (`toolu_1`, `toolu_2`), the first with its 1 MB result in, the second still running; then `more`.
 */
export const megabyteStep = (...more: PendingCall[]): PendingStep => ({
  iteration: 3,
  review: false,
  calls: [
    {
      id: 'toolu_1',
      name: 'lookup',
      input: { q: 'a'.repeat(MB) },
      kind: 'server',
      approval: 'approved',
      result: { content: 'r'.repeat(MB), is_error: false },
      reported: true,
    },
    { id: 'toolu_2', name: 'fetch', input: { q: 'b'.repeat(MB) }, kind: 'server', approval: 'approved' },
    ...more,
  ],
});
