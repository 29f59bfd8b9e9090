/**
 * Meta fields of a session the scripts keep on their own (the revision, stamps, the log's and the storage count's
 * bookkeeping): left out when a test weighs what a session stores against its tenant's storage count.
 */
export const BOOKKEEPING_FIELDS: ReadonlySet<string> = new Set([
  'revision',
  'updated_at',
  'msg_count',
  'bytes',
  'ev_bytes',
  'ev_cut',
  'ev_mark',
  'params_rev',
  // The turns' spend until a record through them succeeded (apply-8.lua `spend_open`; dropped by the run's release,
  // which may come after a snapshot taken once the session left `running`).
  'spend_open',
]);
