import { isAgentTool } from '../schemas.js';
import type { SessionState } from '../store/session-state.js';
import type { SessionStore } from '../store/store.js';
import { childSessionId } from './waiting.js';

/**
 * Sub-agents whose call their parent no longer waits for (spec §7.6: "Cancel and delete reach the children"). A write
 * that drops or replaces the parent's waiting step (`retry`, a rerun, `PUT …/messages`, a deadline) leaves the
 * children of its agent calls at work on calls nothing will take a result for: the agents' sweep cancels each at its
 * look (sweep.ts), which the write makes due before it lands (mutate.ts `Plan.drops`, so a process that dies after
 * the write leaves it to any replica's sweep) and wakes after it.
 */

/** A child still at work: a run in flight, or waiting for an approval, a client result or its own sub-agents. */
export const atWork = (s: SessionState): boolean => s.status === 'running' || s.status === 'requires_action';

/**
 * Whether `parent` still waits for its call `toolUseId`: its step holds the call, unanswered, and the step goes on
 * (`running`: its server calls run first; `requires_action`). A step dropped (pending gone or another step's),
 * a call answered (by its client, a deadline), or a parent that stopped (whose look cancels its children) does not.
 */
export function waitsFor(parent: SessionState, toolUseId: string): boolean {
  if (!atWork(parent)) return false;
  const call = parent.pending?.calls.find((c) => c.id === toolUseId);
  return call !== undefined && !call.result;
}

/** The children at work on the unanswered agent calls of `s`'s step: those a write that drops the step drops. */
export async function childrenAtWork(store: SessionStore, s: SessionState): Promise<string[]> {
  const agents = new Set(s.tools.filter(isAgentTool).map((t) => t.name));
  const ids: string[] = [];
  for (const c of s.pending?.calls ?? []) {
    if (c.kind !== 'client' || c.result || !agents.has(c.name)) continue;
    const child = await store.load(childSessionId(s.id, c.id));
    if (child && atWork(child)) ids.push(child.id);
  }
  return ids;
}
