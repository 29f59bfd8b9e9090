// Sub-agents as the console shows them (docs/API.md "Sub-agents"), computed from what the API returns: no DOM here.
// A call to an `{"type": "agent"}` tool creates a child session whose `parent` names the call; the child is shown
// under that call, and what it (or a session below it) waits for is shown there too, so one page drives the tree.

/** Names of a session's sub-agent tools: the `{"type": "agent", "name"}` entries of its `tools`. */
export function agentToolNames(s) {
  const names = new Set();
  for (const t of s?.tools ?? []) if (t && typeof t === 'object' && t.type === 'agent') names.add(t.name);
  return names;
}

/** `GET …/children` → tool_use_id → the child session that call created. */
export function childrenByCall(children) {
  const byCall = new Map();
  for (const c of children ?? []) if (c?.parent?.tool_use_id) byCall.set(c.parent.tool_use_id, c);
  return byCall;
}

/**
 * What the sessions below a call wait for, from the parent's `required_action.children_waiting` (nested: a child's
 * own `required_action.children_waiting` names its children): tool_use_id of the parent's call → the waiting
 * sessions below it, `{session_id, required_action, depth}` (depth 1: the call's child), nearest first.
 */
export function waitingBelow(requiredAction) {
  const byCall = new Map();
  const walk = (entries, depth, call) => {
    for (const w of entries ?? []) {
      const at = call ?? w.tool_use_id;
      if (!byCall.has(at)) byCall.set(at, []);
      byCall.get(at).push({ session_id: w.session_id, required_action: w.required_action, depth });
      // At most 3 levels exist (the service refuses deeper definitions): the walk is bounded by the data.
      walk(w.required_action?.children_waiting, depth + 1, at);
    }
  };
  walk(requiredAction?.children_waiting, 1, null);
  for (const list of byCall.values()) list.sort((a, b) => a.depth - b.depth);
  return byCall;
}

/**
 * The waiting sessions to show under one call: the child's own state from the children list (read more often than
 * the parent, so it wins for the child), then the deeper ones the parent named. A session that waits only for its
 * own sub-agents is left out: what they wait for is listed instead.
 */
export function waitingFor(child, below = []) {
  const own =
    child?.status === 'requires_action' && child.required_action && !waitsOnlyForAgents(child)
      ? [{ session_id: child.id, required_action: child.required_action, depth: 1 }]
      : [];
  const deeper = below.filter(
    (w) => (w.depth > 1 || w.session_id !== child?.id) && !waitsOnlyForChildren(w.required_action),
  );
  return [...own, ...deeper];
}

/** A session of the children list waiting for the results of its agent calls alone. */
function waitsOnlyForAgents(s) {
  const r = s.required_action;
  const agents = agentToolNames(s);
  return (
    r.type === 'submit_tool_results' &&
    r.tool_calls.length > 0 &&
    r.tool_calls.every((c) => agents.has(c.name))
  );
}

/** A `required_action` (from `children_waiting`) whose every call waits for a child that waits in turn. */
function waitsOnlyForChildren(r) {
  const calls = new Set((r?.children_waiting ?? []).map((w) => w.tool_use_id));
  return (
    r?.type === 'submit_tool_results' && r.tool_calls.length > 0 && r.tool_calls.every((c) => calls.has(c.id))
  );
}

/**
 * Whether the children are worth reading again soon: one of them is running or waits, or the session has an agent
 * call open (waiting for its result: `submit_tool_results`) whose child is not listed yet or has not ended. A call
 * that waits for its approval (`approve_tool_calls`) or a reply under review (`review_turn`) has no child until a
 * person acts, and that act moves the session on (its `revision`): nothing to read meanwhile.
 */
export function treeActive(s, children, agents) {
  if ((children ?? []).some((c) => c.status === 'running' || c.status === 'requires_action')) return true;
  const byCall = childrenByCall(children);
  const r = s?.status === 'requires_action' ? s.required_action : null;
  const open = r?.type === 'submit_tool_results' ? (r.tool_calls ?? []) : [];
  return open.some((c) => agents.has(c.name) && !['idle', 'failed'].includes(byCall.get(c.id)?.status));
}

/** A child's line: its title (`metadata.title`), else the call's prompt, cut to 80 characters; or null. */
export function childTitle(child, input) {
  const t = child?.metadata?.title;
  const text = typeof t === 'string' && t.trim() ? t : typeof input?.prompt === 'string' ? input.prompt : '';
  const one = text.trim().replace(/\s+/g, ' ');
  if (!one) return null;
  return one.length > 80 ? `${one.slice(0, 79)}…` : one;
}
