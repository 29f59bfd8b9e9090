import { createHash } from 'node:crypto';
import { isAgentTool } from '../schemas.js';
import { sessionView, type SessionView } from '../sessions/view.js';
import { channelName, eventsChannel, sessionKeys } from '../store/keys.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import type { SessionState } from '../store/session-state.js';
import { EVENT_LOG_MAX_BYTES, NOTICE_MAX_BYTES, type SessionStore } from '../store/store.js';
import './lua/commands.js';

type Action = NonNullable<SessionView['required_action']>;
/** A child that waits for a client, as its parent's `required_action.children_waiting` names it. */
export interface ChildWaiting {
  session_id: string;
  /** The parent's agent call the child answers. */
  tool_use_id: string;
  required_action: Action & { children_waiting?: ChildWaiting[] };
}

/** Most levels above a session (depth ≤ 3: a grandchild has two). Bounds the walk up whatever a record says. */
const MAX_ANCESTORS = 2;

export const childSessionId = (parentId: string, toolUseId: string) =>
  `ses_sub${createHash('sha256').update(`${parentId}:${toolUseId}`).digest('hex').slice(0, 24)}`;

/**
 * What a tree's parents tell of the descendants that wait for a client (spec §7.6: "approvals of a child surface on
 * the parent"): `required_action.children_waiting` on `GET /v1/sessions/:id`, computed on read, and the event
 * `children.waiting` in the parent's own log, so a client that follows only the parent's stream learns it too.
 *
 * The event is written by the agents' sweep (sweep.ts), which looks at a tree member at the end of each of its runs
 * (a child entering `requires_action` is such an end), when a write moves a waiting child on (its client's answer:
 * src/sessions/mutate.ts), and at a parked parent every PARKED_MS. Each look recomputes
 * the lists of the member and of its ancestors, and children-waiting-2.lua appends the event only when a list
 * differs from the one last told (a fingerprint in the parent's meta hash, checked and set in the script that
 * appends). So a crash before the append loses nothing (the member is still due: the sweep moves it on only after
 * the look), and a look repeated on two replicas writes one event. Two looks racing may write an older list after a
 * newer one; the next look (the next run end in the tree, or the parent's next recheck) writes the current list.
 */
export class WaitingTree {
  constructor(
    private readonly redis: RedisClient,
    private readonly store: SessionStore,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'agents');
  }

  /**
   * The children the session's open agent calls wait for that wait for a client themselves (`requires_action`,
   * other than for their own sub-agents' results alone), with their `required_action` (and, as
   * `children_waiting`, their own children that wait for a client, in turn).
   */
  async waiting(s: SessionState): Promise<ChildWaiting[]> {
    if (s.status !== 'requires_action') return [];
    const agents = new Set(s.tools.filter(isAgentTool).map((t) => t.name));
    const out: ChildWaiting[] = [];
    for (const c of s.pending?.calls ?? []) {
      if (c.kind !== 'client' || c.result || !agents.has(c.name)) continue;
      const child = await this.store.load(childSessionId(s.id, c.id));
      const action = child && child.tenant === s.tenant ? sessionView(child).required_action : null;
      if (!child || !action) continue;
      const below = await this.waiting(child);
      // A child that waits only for its own sub-agents waits for no client unless one of them does.
      if (!below.length && this.onlyAgents(child, action)) continue;
      out.push({
        session_id: child.id,
        tool_use_id: c.id,
        required_action: below.length ? { ...action, children_waiting: below } : action,
      });
    }
    return out;
  }

  /** The child's action is its own agent calls only (results the sweep gives, not a client). */
  private onlyAgents(child: SessionState, action: Action): boolean {
    if (action.type !== 'submit_tool_results') return false;
    const agents = new Set(child.tools.filter(isAgentTool).map((t) => t.name));
    return action.tool_calls.every((c) => agents.has(c.name));
  }

  /** Tells the session and each of its ancestors (fresh reads) their current lists, where they changed. */
  async tellUp(id: string): Promise<void> {
    let s = await this.store.load(id);
    for (let level = 0; s && level <= MAX_ANCESTORS; level++) {
      await this.tell(s);
      const up: string | undefined = s.parent?.session_id;
      s = up ? await this.store.load(up) : null;
    }
  }

  /** Appends `children.waiting` to the session's log if its list changed since the last one written. */
  private async tell(s: SessionState): Promise<void> {
    const list = await this.waiting(s);
    const data = JSON.stringify({ children_waiting: list });
    const fp = list.length ? createHash('sha256').update(data).digest('hex').slice(0, 32) : '';
    const k = sessionKeys(s.id);
    // Most looks change nothing: one HGET spares them the script (which checks again, atomically).
    if (((await this.redis.hget(k.meta, 'cw_fp')) ?? '') === fp) return;
    const o = this.store.options;
    const tap = this.store.eventTap?.(s.id, ['children.waiting'], s.tenant);
    if (tap?.ready) await tap.ready;
    await this.redis.agentsChildrenWaiting(
      k.meta,
      k.events,
      fp,
      data,
      channelName(this.redis, eventsChannel(s.id)),
      o.eventLogMax,
      Date.now(),
      NOTICE_MAX_BYTES,
      o.eventLogMaxBytes ?? EVENT_LOG_MAX_BYTES,
    );
    tap?.landed();
  }
}
