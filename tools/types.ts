import type { BetaRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';

/**
 * A tool the service runs itself. `tool` is what the SDK's tool runner calls (built with `betaZodTool`, so the
 * input is validated with zod and a thrown error becomes an `is_error` result).
 */
export interface ServerTool {
  tool: BetaRunnableTool<any>;
  /** Calls wait for approve/deny/edit by default; a session's `approval` policy overrides this. */
  requiresApproval: boolean;
  /**
   * Safe to run again when a crash interrupted it mid-run. A non-idempotent tool interrupted by a crash is answered
   * with an `is_error` "interrupted" result instead of running twice.
   */
  idempotent: boolean;
  /** Idempotency call by call, over `idempotent`, for a tool whose commands differ (the memory tool: `view` only). */
  idempotentFor?: (input: unknown) => boolean;
  /** A tenant tool's copy: its calls become tool tasks (src/tenant-tools/) instead of running here. */
  runner?: 'worker' | 'http';
  /**
   * The `tool` label of its calls in the metrics, when not its name: a name a tenant made up (a tenant MCP server's
   * tools) never reaches the unauthenticated /metrics, nor grows its series.
   */
  metricLabel?: string;
}
