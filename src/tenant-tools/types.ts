/**
 * A tenant tool (spec §7.1) as its registry stores it and as a session keeps its copy (the meta field
 * `tenant_tools`): the tool's code runs outside the service, in a worker that claims its calls (`worker`) or behind
 * a URL the service calls (`http`).
 */
export type TenantToolRunner =
  { type: 'worker' } | { type: 'http'; url: string; timeout_ms?: number | undefined };

export interface TenantToolDef {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
  runner: TenantToolRunner;
  idempotent: boolean;
  read_only: boolean;
  /** No worker answered within this (ms, from the call's first offer): the call gets an `is_error` result. */
  timeout_ms: number;
  /** Offers of one call, a lost lease each (then the call gets an `is_error` result). */
  max_attempts: number;
  /** The http runner's signing secret, sealed as webhook secrets are; never answered after the PUT. */
  secret?: string;
  created_at: number;
  updated_at: number;
  /** Bumped by each PUT (`ETag`, `If-Match`); set by the store's script. Absent in records written before it: 1. */
  revision?: number;
  /**
   * The PUT that wrote this definition, when it had an `Idempotency-Key`: its token (src/store/idempotency.ts
   * `appliedToken`), whether it made the tool and its secret. A retry of it finds it here when its answer's record
   * was not kept (its process died first) and answers as it did. Gone with the next PUT; never in a session's copy.
   */
  applied?: { token: string; created: boolean; secret_made: boolean };
}
