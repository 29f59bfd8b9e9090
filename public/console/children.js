// Sub-agents in a session's view: the child session each agent call created, nested under that call (its id, title,
// status, a link to open it), and what the sessions below the call wait for, with Approve and Deny for their tool
// calls, so one page drives the whole tree (docs/API.md "Sub-agents").

import { useEffect, useState } from 'preact/hooks';
import { StatusBadge, api, html, pretty } from './ui.js';
import { agentToolNames, childTitle, childrenByCall, treeActive, waitingBelow, waitingFor } from './tree.js';

/** How often the children are read again while one of them works (ms): their events are not the parent's. */
const TREE_POLL_MS = 1000;

/**
 * The children of a session that has sub-agent tools (nothing is read for one without): read when the session moves
 * on (its `revision`), and every TREE_POLL_MS while a child runs or waits — a child's progress is in its own event
 * log, not in the parent's — together with the parent's `required_action.children_waiting` (only its GET has it).
 */
export function useTree(s) {
  const agents = agentToolNames(s);
  const [tree, setTree] = useState({ children: [], required: null });
  const [tick, setTick] = useState(0);
  const enabled = agents.size > 0;
  useEffect(() => {
    if (!enabled) return undefined;
    let stopped = false;
    let timer = null;
    (async () => {
      const [list, parent] = await Promise.all([
        api.children(s.id).catch(() => null),
        api.getSession(s.id).catch(() => null),
      ]);
      if (stopped) return;
      const children = list?.data ?? tree.children;
      setTree({ children, required: parent ? parent.required_action : tree.required });
      if (treeActive(parent ?? s, children, agents))
        timer = setTimeout(() => setTick((n) => n + 1), TREE_POLL_MS);
    })();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [s?.id, s?.revision, enabled, tick]);
  return {
    agents,
    byCall: childrenByCall(tree.children),
    below: waitingBelow(tree.required),
    reload: () => setTick((n) => n + 1),
  };
}

/** Under an agent call's card: its child, and what the sessions below the call wait for. */
export function ChildPanel({ call, tree, act, busy }) {
  const child = tree.byCall.get(call.id);
  // A call answered without a child (a client answered it first, or a quota refused the child), or one that waits for
  // its approval (no child until it is approved) or the review of its reply (none until `continue`): nothing to show.
  if (!child && ['done', 'denied', 'awaiting_approval', 'awaiting_review'].includes(call.state)) return null;
  const waiting = waitingFor(child, tree.below.get(call.id) ?? []);
  const title = childTitle(child, call.input);
  const decide = async (sessionId, toolUseId, decision) => {
    await act(() => api.decide(sessionId, toolUseId, { decision }));
    tree.reload();
  };
  return html`<div
    class="child"
    data-child=${child?.id ?? ''}
    data-status=${child?.status ?? 'starting'}
    role="group"
    aria-label=${`Sub-agent session of ${call.name} ${call.id}`}
  >
    <div class="child-head">
      <span class="label">Sub-agent session</span>
      ${
        child
          ? html`<a class="child-link" href=${`#/sessions/${child.id}`}><code>${child.id}</code></a>
              <${StatusBadge} status=${child.status} />`
          : html`<span class="muted">starting…</span>`
      }
    </div>
    ${title && html`<p class="child-title">${title}</p>`}
    ${waiting.map((w) => html`<${Waiting} key=${w.session_id} w=${w} decide=${decide} busy=${busy} />`)}
  </div>`;
}

const WAITS_FOR = {
  approve_tool_calls: 'waits for approval',
  submit_tool_results: 'waits for a client result',
  review_tool_results: 'waits for its results to be reviewed',
};

/** One waiting session below the call: its tool calls to approve or deny here; other actions on its own page. */
function Waiting({ w, decide, busy }) {
  const r = w.required_action;
  const link = html`<a href=${`#/sessions/${w.session_id}`}><code>${w.session_id}</code></a>`;
  return html`<div class="child-waiting" data-session=${w.session_id} data-type=${r.type}>
    <p>
      ${w.depth > 1 ? html`A session below it, ${link}, ` : 'It '}${`${WAITS_FOR[r.type] ?? r.type}: `}${
        r.type === 'approve_tool_calls' ? '' : html`open ${link} to act.`
      }
    </p>
    ${
      r.type === 'approve_tool_calls' &&
      r.tool_calls.map(
        (c) =>
          html`<div class="child-call" key=${c.id} data-tool=${c.name} data-tool-use-id=${c.id}>
            <code>${c.name}</code>
            <pre class="tool-input">${pretty(c.input ?? {})}</pre>
            <div class="row">
              <button
                class="primary approve"
                disabled=${busy}
                aria-label=${`Approve ${c.name} ${c.id} of ${w.session_id}`}
                onClick=${() => decide(w.session_id, c.id, 'approve')}
              >
                Approve
              </button>
              <button
                class="danger deny"
                disabled=${busy}
                aria-label=${`Deny ${c.name} ${c.id} of ${w.session_id}`}
                onClick=${() => decide(w.session_id, c.id, 'deny')}
              >
                Deny
              </button>
            </div>
          </div>`,
      )
    }
  </div>`;
}
