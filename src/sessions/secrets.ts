/**
 * Credentials a session's params may carry for the API (Anthropic's MCP connector: `params.mcp_servers[]
 * .authorization_token`, also inside a sub-agent's `session` in `tools`). The session keeps them and sends them
 * upstream; what it shows does not: its events (replayed to client tokens, sent to webhooks) and the session resource
 * a client token reads carry `REDACTED` in their place. A tenant key reads its own session whole.
 */
const SECRET_KEYS: ReadonlySet<string> = new Set(['authorization_token']);

export const REDACTED = '[redacted]';

/**
 * The value with every secret field's string replaced by REDACTED; the same object (no copy) when it holds none.
 * Recursion depth is that of a validated body (src/json-depth.ts bounds it).
 */
export function withoutSecrets<T>(value: T): T {
  if (Array.isArray(value)) {
    let out: unknown[] | null = null;
    for (let i = 0; i < value.length; i++) {
      const v: unknown = value[i];
      const r = withoutSecrets(v);
      if (r !== v) (out ??= value.slice())[i] = r;
    }
    return (out ?? value) as T;
  }
  if (value === null || typeof value !== 'object') return value;
  const obj = value as Record<string, unknown>;
  let out: Record<string, unknown> | null = null;
  for (const [k, v] of Object.entries(obj)) {
    const r = SECRET_KEYS.has(k) && typeof v === 'string' ? REDACTED : withoutSecrets(v);
    if (r !== v) (out ??= { ...obj })[k] = r;
  }
  return (out ?? value) as T;
}
