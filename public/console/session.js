// One session: its conversation (history + the turn streaming now), the tool calls as cards with their steering
// controls, usage and cost, every steering action of the API, and the raw events. Over 400 lines because the
// cards, the action bar and the settings editor share the session's state and its one `act()` helper; split by
// component, each part would need that plumbing passed around.

import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ErrorNote, StatusBadge, api, html, pretty } from './ui.js';
import { ChildPanel, useTree } from './children.js';
import {
  SessionModel,
  canCompact,
  canContinue,
  formatFigures,
  conversation,
  sessionCost,
  eventSummary,
  formatCost,
  resultText,
  sessionTitle,
} from './view.js';

/** Re-render at most this often while deltas stream (ms). */
const RENDER_EVERY_MS = 30;
/** Events listed in the raw panel (the newest). */
const PANEL_EVENTS = 2000;

/** Reads of the history before settling for one the session moved on during (each retry: it moved on again). */
const SNAPSHOT_TRIES = 4;

/**
 * The session, its history and its iteration records, as of one revision. Three GETs are not one read: a commit
 * landing between them gives a history newer than the session's revision, whose turns the view then shows twice
 * (from the history, and live from events it takes for newer). So the session is read again after the others:
 * the same revision means nothing changed in between (every change moves it). When it moved, the later read is
 * the lower bound next time. After SNAPSHOT_TRIES the last read is taken with the revision before it: the events
 * of what moved have a higher revision, so they make the view read again.
 */
async function readSnapshot(id) {
  let s = await api.getSession(id);
  for (let attempt = 1; ; attempt++) {
    const m = await api.messages(id);
    // The turns' time and cost; the conversation shows without them if they cannot be read.
    const r = await api.iterations(id).catch(() => null);
    const again = await api.getSession(id);
    if (again.revision === s.revision || attempt >= SNAPSHOT_TRIES) return { s, m, r };
    s = again;
  }
}

export function SessionView({ id, onChange, onStatus }) {
  const model = useMemo(() => new SessionModel(id), [id]);
  const [, setTick] = useState(0);
  const [conn, setConn] = useState('connecting');
  const [loadError, setLoadError] = useState(null);
  const [actionError, setActionError] = useState(null);
  const [busy, setBusy] = useState(false);
  /** The effect's `refresh` and `remove`, for the action bar. */
  const calls = useRef({ refresh: () => Promise.resolve(), remove: () => Promise.resolve() });

  useEffect(() => {
    let stopped = false;
    /** Set once the session is deleted (or its DELETE is on its way): nothing is read of it any more. */
    let deleted = false;
    let deleting = false;
    let renderTimer = null;
    const bump = () => {
      if (renderTimer === null)
        renderTimer = setTimeout(() => {
          renderTimer = null;
          if (!stopped) setTick((n) => n + 1);
        }, RENDER_EVERY_MS);
    };
    // One read of the session and its history at a time; asked again while one runs, it runs once more after.
    let inflight = null;
    let again = false;
    const refresh = () => {
      if (deleted || deleting) return Promise.resolve();
      if (inflight) {
        again = true;
        return inflight;
      }
      inflight = (async () => {
        do {
          again = false;
          try {
            const { s, m, r } = await readSnapshot(id);
            if (stopped) return;
            model.setSnapshot(s, m.data);
            if (r) model.setIterations(r.data);
            setLoadError(null);
          } catch (err) {
            if (!stopped) setLoadError(err);
          }
          bump();
        } while (again && !stopped && !deleted && !deleting);
        inflight = null;
      })();
      return inflight;
    };
    // No read of the session is on its way when it goes (it would answer 404, an error in the page's log): the read
    // in flight ends first, and none starts until the DELETE has answered.
    const remove = async () => {
      deleting = true;
      try {
        await inflight;
        const r = await api.remove(id);
        deleted = true;
        return r;
      } finally {
        deleting = false;
      }
    };
    calls.current = { refresh, remove };
    refresh();
    const stream = api.follow(id, {
      onEvent(ev) {
        const newer = typeof ev.revision === 'number' && ev.revision > model.historyRevision;
        model.apply(ev);
        // A deleted session has nothing left to read.
        if (ev.type === 'session.deleted') deleted = true;
        if (newer && !deleted) {
          refresh();
          if (ev.type === 'session.status') onChange();
        }
        bump();
      },
      onState(state) {
        if (stopped) return;
        setConn(state);
        if (state === 'expired' || state === 'live') refresh();
      },
    });
    return () => {
      stopped = true;
      clearTimeout(renderTimer);
      stream.close();
    };
  }, [id]);

  /** Runs one steering call; its error is shown, the session is read again either way (but after a delete). */
  const act = async (fn, { reread = true } = {}) => {
    setBusy(true);
    setActionError(null);
    try {
      return await fn();
    } catch (err) {
      setActionError(err);
      return undefined;
    } finally {
      setBusy(false);
      if (reread) calls.current.refresh();
    }
  };

  const s = model.session;
  // Before the early return: a hook is called on every render.
  const tree = useTree(s);
  // The status this view follows live, for the session list (which reads every session only every few seconds).
  useEffect(() => {
    if (s) onStatus?.(id, s.status);
  }, [s?.status]);
  if (!s) {
    return html`<section class="panel">
      <h2>Session <code>${id}</code></h2>
      ${loadError ? html`<${ErrorNote} error=${loadError} />` : html`<p class="muted">Loading…</p>`}
    </section>`;
  }
  const items = conversation(model);
  return html`<article
    class="session"
    data-session=${id}
    data-status=${s.status}
    aria-labelledby="session-title"
  >
    <${SessionHeader} s=${s} conn=${conn} title=${sessionTitle(s, model.history)} />
    <${ErrorNote} error=${loadError} />
    <${Required} s=${s} act=${act} busy=${busy} agents=${tree.agents} />
    <section class="conversation" aria-label="Conversation">
      ${items.length === 0 && html`<p class="muted">No messages yet.</p>`}
      ${items.map((it, i) =>
        it.kind === 'user'
          ? html`<${UserTurn} key=${`u${i}`} item=${it} />`
          : html`<${AssistantTurn} key=${`a${i}`} item=${it} s=${s} act=${act} busy=${busy} tree=${tree} />`,
      )}
      ${
        s.status === 'failed' &&
        s.error &&
        html`<div class="turn error-turn" role="alert">
          <strong>Failed: ${s.error.code}</strong> ${s.error.message}
          ${s.error.retryable ? html` <span class="muted">(retryable)</span>` : ''}
        </div>`
      }
      ${s.status === 'idle' && s.stop_reason && html`<p class="stopped muted">Run ended: <code>${s.stop_reason}</code></p>`}
    </section>
    <${ErrorNote} error=${actionError} />
    <${Composer} s=${s} act=${act} busy=${busy} />
    <${Actions} s=${s} act=${act} busy=${busy} remove=${() => calls.current.remove()} />
    <${Settings} s=${s} act=${act} busy=${busy} />
    <${EventsPanel} model=${model} />
  </article>`;
}

function SessionHeader({ s, conn, title }) {
  const u = s.usage ?? {};
  const cost = sessionCost(s);
  const parent = typeof s.metadata?.forked_from === 'string' ? s.metadata.forked_from : null;
  const caller = s.parent?.session_id ?? null;
  return html`<header class="session-head">
    ${title && html`<p class="session-name">${title}</p>`}
    <h2 id="session-title"><code>${s.id}</code> <${StatusBadge} status=${s.status} /></h2>
    ${
      parent &&
      html`<p class="forked-from">
        Forked from <a href=${`#/sessions/${parent}`}><code>${parent}</code></a
        >${
          s.metadata.forked_at_iteration !== undefined
            ? ` at iteration ${s.metadata.forked_at_iteration}`
            : ''
        }
      </p>`
    }
    ${
      caller &&
      html`<p class="parent-link">
        Sub-agent session of <a href=${`#/sessions/${caller}`}><code>${caller}</code></a> (call
        <code>${s.parent.tool_use_id}</code>)
      </p>`
    }
    <p class="conn conn-${conn}" role="status" aria-live="polite" data-conn=${conn}>${connLabel(conn)}</p>
    <dl class="figures">
      <div>
        <dt>Model</dt>
        <dd>${s.params?.model ?? '—'}</dd>
      </div>
      <div>
        <dt>Turns</dt>
        <dd class="iteration">${s.iteration}</dd>
      </div>
      <div>
        <dt>Revision</dt>
        <dd>${s.revision}</dd>
      </div>
      <div>
        <dt>Input tokens</dt>
        <dd class="usage-input">${(u.input_tokens ?? 0).toLocaleString()}</dd>
      </div>
      <div>
        <dt>Output tokens</dt>
        <dd class="usage-output">${(u.output_tokens ?? 0).toLocaleString()}</dd>
      </div>
      <div>
        <dt>Cache write / read</dt>
        <dd>
          ${`${(u.cache_creation_input_tokens ?? 0).toLocaleString()} / ${(u.cache_read_input_tokens ?? 0).toLocaleString()}`}
        </dd>
      </div>
      <div>
        <dt>Cost</dt>
        <dd class="cost" title="at list prices, as the server counts it">${formatCost(cost)}</dd>
      </div>
    </dl>
  </header>`;
}

function connLabel(conn) {
  return (
    {
      connecting: 'Connecting…',
      live: 'Live',
      offline: 'Disconnected: reconnecting…',
      expired: 'The event log was trimmed: reloaded from the history',
      ended: 'The session was deleted',
      closed: 'Closed',
    }[conn] ?? conn
  );
}

/** What the session waits for, in words, and the step-wide action (continue after a review). */
function Required({ s, act, busy, agents }) {
  const r = s.required_action;
  if (s.status !== 'requires_action' || !r) return null;
  const n = r.tool_calls.length;
  const subAgents =
    r.type === 'submit_tool_results' && n > 0 && r.tool_calls.every((c) => agents.has(c.name));
  const text = subAgents
    ? `${n} sub-agent call${n === 1 ? '' : 's'} wait${n === 1 ? 's' : ''} for ${n === 1 ? 'its session' : 'their sessions'}: see below what ${n === 1 ? 'it waits' : 'they wait'} for.`
    : {
        approve_tool_calls: `${n} tool call${n === 1 ? '' : 's'} wait${n === 1 ? 's' : ''} for approval: approve, edit or deny ${n === 1 ? 'it' : 'each'} below.`,
        submit_tool_results: `${n} client tool call${n === 1 ? '' : 's'} wait${n === 1 ? 's' : ''} for a result: submit ${n === 1 ? 'it' : 'each'} below.`,
        review_tool_results: `The tool results wait for review: replace any below, then continue.`,
      }[r.type];
  return html`<div class="required" role="region" aria-label="Required action" data-type=${r.type}>
    <strong>Action needed.</strong> ${text}${' '}${
      r.type === 'review_tool_results' &&
      html` <button class="primary" disabled=${busy} onClick=${() => act(() => api.continue(s.id))}>
        Continue
      </button>`
    }
  </div>`;
}

function UserTurn({ item }) {
  return html`<div class=${`turn user${item.queued ? ' queued' : ''}`}>
    <div class="who">
      You${item.queued ? html` <span class="badge">${item.interrupt ? 'interrupting' : 'queued'}</span>` : ''}
    </div>
    ${item.blocks.map((b) => html`<${Block} block=${b} />`)}
  </div>`;
}

function AssistantTurn({ item, s, act, busy, tree }) {
  return html`<div class=${`turn assistant${item.live ? ' streaming' : ''}`} data-turn=${item.turn}>
    <div class="who">
      ${'Assistant '}<span class="muted">turn ${item.turn}</span>${item.live ? ' ' : ''}${
        item.live && html`<span class="badge live">streaming</span>`
      }${
        formatFigures(item.figures) &&
        html` <span class="muted turn-figures" title="upstream time · cost at list prices"
          >${formatFigures(item.figures)}</span
        >`
      }
    </div>
    ${item.blocks.map((b) =>
      b.type === 'tool_use' && b.call
        ? html`<${ToolCard} key=${b.id} call=${b.call} s=${s} act=${act} busy=${busy} tree=${tree} />`
        : html`<${Block} block=${b} />`,
    )}
  </div>`;
}

function Block({ block: b }) {
  switch (b.type) {
    case 'text':
      return html`<div class="text">${b.text}</div>`;
    case 'thinking':
      return html`<details class="thinking">
        <summary>Thinking</summary>
        <div class="text">${b.thinking}</div>
      </details>`;
    case 'redacted_thinking':
      return html`<p class="thinking muted">Thinking (redacted)</p>`;
    case 'compaction':
      return html`<div class="compaction" role="note">
        <div class="label">Compaction summary</div>
        <div class="text">${b.content ?? '(no summary)'}</div>
      </div>`;
    case 'image':
      return html`<p class="muted">[image]</p>`;
    case 'document':
      return html`<p class="muted">[document${b.title ? `: ${b.title}` : ''}]</p>`;
    default:
      return html`<details class="block-other">
        <summary><code>${b.type}</code></summary>
        <pre>${pretty(b)}</pre>
      </details>`;
  }
}

const CALL_STATES = {
  done: 'done',
  denied: 'denied',
  running: 'running',
  awaiting_approval: 'awaiting approval',
  awaiting_review: 'awaiting review',
  awaiting_result: 'awaiting result',
  under_review: 'under review',
  pending: 'pending',
};

function ToolCard({ call, s, act, busy, tree }) {
  const isError = call.result?.is_error === true;
  const [editing, setEditing] = useState(false);
  const [inputText, setInputText] = useState(pretty(call.input ?? {}));
  const [reason, setReason] = useState('');
  const [resultDraft, setResultDraft] = useState(call.result ? resultText(call.result.content) : '');
  const [resultIsError, setResultIsError] = useState(isError);
  const [localError, setLocalError] = useState(null);
  const label = `${call.name} ${call.id}`;

  const approveEdited = () => {
    let input;
    try {
      input = JSON.parse(inputText);
    } catch (err) {
      setLocalError({ code: 'invalid_json', message: err.message });
      return;
    }
    setLocalError(null);
    act(() => api.decide(s.id, call.id, { decision: 'approve', input })).then((r) => r && setEditing(false));
  };
  const submitResult = () =>
    act(() => api.putResult(s.id, call.id, { content: resultDraft, is_error: resultIsError }));

  return html`<section
    class=${`tool-card state-${call.state}${isError ? ' is-error' : ''}`}
    data-tool=${call.name}
    data-tool-use-id=${call.id}
    data-state=${call.state}
    aria-label=${`Tool call ${call.name}`}
  >
    <header>
      <span class="tool-name"><code>${call.name}</code></span>
      <span class=${`badge call-${call.state}`}>${CALL_STATES[call.state]}</span>
      ${isError && html`<span class="badge call-error">error</span>`}
      ${typeof call.duration === 'number' && html`<span class="muted">${call.duration} ms</span>`}
      <code class="muted tool-id">${call.id}</code>
    </header>
    <div class="tool-io">
      <div class="label">Input</div>
      <pre class="tool-input">${pretty(call.input ?? {})}</pre>
      ${
        call.result &&
        html`<div class="label">Result</div>
          <pre class=${`tool-result${isError ? ' error-text' : ''}`}>${resultText(call.result.content)}</pre>`
      }
    </div>
    ${tree.agents.has(call.name) && html`<${ChildPanel} call=${call} tree=${tree} act=${act} busy=${busy} />`}
    ${
      call.state === 'awaiting_approval' &&
      html`<div class="tool-actions">
        ${
          editing
            ? html`<label for=${`edit-${call.id}`}>Edit the input (JSON)</label>
                <textarea
                  id=${`edit-${call.id}`}
                  class="mono edit-input"
                  rows="4"
                  value=${inputText}
                  onInput=${(e) => setInputText(e.currentTarget.value)}
                ></textarea>
                <div class="row">
                  <button class="primary approve-edited" disabled=${busy} onClick=${approveEdited}>
                    Approve with this input
                  </button>
                  <button disabled=${busy} onClick=${() => setEditing(false)}>Cancel edit</button>
                </div>`
            : html`<div class="row">
                  <button
                    class="primary approve"
                    disabled=${busy}
                    aria-label=${`Approve ${label}`}
                    onClick=${() => act(() => api.decide(s.id, call.id, { decision: 'approve' }))}
                  >
                    Approve
                  </button>
                  <button class="edit" disabled=${busy} onClick=${() => setEditing(true)}>Edit input…</button>
                </div>
                <div class="row">
                  <input
                    class="deny-reason"
                    aria-label=${`Reason to deny ${label}`}
                    placeholder="reason (optional)"
                    value=${reason}
                    onInput=${(e) => setReason(e.currentTarget.value)}
                  />
                  <button
                    class="danger deny"
                    disabled=${busy}
                    onClick=${() => act(() => api.decide(s.id, call.id, { decision: 'deny', ...(reason ? { reason } : {}) }))}
                  >
                    Deny
                  </button>
                </div>`
        }
        <${ErrorNote} error=${localError} />
      </div>`
    }
    ${
      (call.state === 'awaiting_result' || call.state === 'under_review') &&
      html`<${tree.agents.has(call.name) && call.state === 'awaiting_result' ? AnswerYourself : Plain}>
        <div class="tool-actions">
          <label for=${`result-${call.id}`}
            >${call.state === 'awaiting_result' ? 'Result to submit' : 'Replace the result'}</label
          >
          <textarea
            id=${`result-${call.id}`}
            class="mono result-draft"
            rows="3"
            value=${resultDraft}
            onInput=${(e) => setResultDraft(e.currentTarget.value)}
          ></textarea>
          <div class="row">
            <label class="check"
              ><input
                type="checkbox"
                checked=${resultIsError}
                onChange=${(e) => setResultIsError(e.currentTarget.checked)}
              />
              is an error</label
            >
            <button
              class="primary submit-result"
              disabled=${busy || resultDraft === ''}
              onClick=${submitResult}
            >
              ${call.state === 'awaiting_result' ? 'Submit result' : 'Replace result'}
            </button>
          </div>
        </div><//
      >`
    }
  </section>`;
}

const Plain = ({ children }) => children;

/** An agent call's result form, folded: its sub-agent answers it (a result given here drops the child's). */
const AnswerYourself = ({ children }) =>
  html`<details class="answer-yourself">
    <summary>Answer the call yourself (the sub-agent's result is then dropped)</summary>
    ${children}
  </details>`;

function Composer({ s, act, busy }) {
  const [text, setText] = useState('');
  const [interrupt, setInterrupt] = useState(false);
  const send = async (e) => {
    e?.preventDefault();
    if (!text.trim()) return;
    const sent = text;
    const r = await act(() => api.addMessage(s.id, sent, interrupt));
    // Cleared only if unchanged meanwhile: the person may already be typing the next message.
    if (r) setText((current) => (current === sent ? '' : current));
    if (r && interrupt) setInterrupt(false);
  };
  const running = s.status === 'running' || s.status === 'requires_action';
  return html`<form class="composer" onSubmit=${send} aria-label="Follow-up">
    <label for="composer-text">${running ? 'Follow-up (sent at the next turn boundary)' : 'Message'}</label>
    <textarea
      id="composer-text"
      rows="2"
      value=${text}
      placeholder="Ctrl+Enter sends"
      onInput=${(e) => setText(e.currentTarget.value)}
      onKeyDown=${(e) => e.key === 'Enter' && (e.ctrlKey || e.metaKey) && send(e)}
    ></textarea>
    <div class="row">
      <label class="check"
        ><input
          type="checkbox"
          id="composer-interrupt"
          checked=${interrupt}
          onChange=${(e) => setInterrupt(e.currentTarget.checked)}
        />
        Interrupt the turn in flight</label
      >
      <button type="submit" class="primary" disabled=${busy || !text.trim()}>Send</button>
    </div>
  </form>`;
}

function Actions({ s, act, busy, remove }) {
  const [retryTokens, setRetryTokens] = useState('');
  /** Empty: the latest iteration record (fork numbers records, turns and compactions: `iteration + compactions`). */
  const [forkAt, setForkAt] = useState('');
  const records = s.iteration + (s.compactions ?? 0);
  const [confirmDelete, setConfirmDelete] = useState(false);
  const st = s.status;
  const canCancel = st === 'running' || st === 'requires_action';
  const canRetry = st === 'idle' || st === 'requires_action' || st === 'failed';
  const fork = async () => {
    const r = await act(() => api.fork(s.id, forkAt === '' ? records : Number(forkAt)));
    if (r) location.hash = `#/sessions/${r.id}`;
  };
  const retry = () =>
    act(() => api.retry(s.id, retryTokens ? { params: { max_tokens: Number(retryTokens) } } : {}));
  return html`<section class="actions" aria-label="Actions">
    <h3>Steer</h3>
    <div class="row">
      <button
        class="danger cancel"
        disabled=${busy || !canCancel}
        onClick=${() => act(() => api.cancel(s.id))}
      >
        Cancel run
      </button>
      <button
        class="continue"
        disabled=${busy || !canContinue(s)}
        onClick=${() => act(() => api.continue(s.id))}
      >
        Continue
      </button>
      <button class="resume" disabled=${busy || st !== 'failed'} onClick=${() => act(() => api.resume(s.id))}>
        Resume
      </button>
      <button
        class="compact"
        disabled=${busy || !canCompact(s)}
        title="Summarize the history (POST …/compact)"
        onClick=${() => act(() => api.compact(s.id))}
      >
        Compact
      </button>
    </div>
    <div class="row">
      <label class="inline" for="retry-max-tokens">Retry with max_tokens</label>
      <input
        id="retry-max-tokens"
        type="number"
        min="1"
        placeholder="unchanged"
        value=${retryTokens}
        onInput=${(e) => setRetryTokens(e.currentTarget.value)}
      />
      <button class="retry" disabled=${busy || !canRetry} onClick=${retry}>Retry last turn</button>
    </div>
    <div class="row">
      <label class="inline" for="fork-at">Fork at record</label>
      <input
        id="fork-at"
        type="number"
        min="0"
        max=${records}
        value=${forkAt}
        placeholder=${`latest (${records})`}
        onInput=${(e) => setForkAt(e.currentTarget.value)}
      />
      <button class="fork" disabled=${busy} onClick=${fork}>Fork</button>
    </div>
    <div class="row">
      ${
        confirmDelete
          ? html`<button
                class="danger"
                disabled=${busy}
                onClick=${async () => (await act(remove, { reread: false })) && (location.hash = '#/')}
              >
                Delete for good
              </button>
              <button onClick=${() => setConfirmDelete(false)}>Keep it</button>`
          : html`<button class="danger" disabled=${busy} onClick=${() => setConfirmDelete(true)}>
              Delete…
            </button>`
      }
    </div>
  </section>`;
}

const SETTING_KEYS = [
  'params',
  'max_iterations',
  'approval',
  'review_tool_results',
  'on_tool_error',
  'on_max_tokens',
  'cache_tool_results',
  'stream',
  'run_tools_eagerly',
  'metadata',
];

function Settings({ s, act, busy }) {
  const current = () => pretty(Object.fromEntries(SETTING_KEYS.filter((k) => k in s).map((k) => [k, s[k]])));
  const [text, setText] = useState(current);
  const [dirty, setDirty] = useState(false);
  const [error, setError] = useState(null);
  useEffect(() => {
    if (!dirty) setText(current());
  }, [s.revision]);
  const save = async (e) => {
    e.preventDefault();
    let body;
    try {
      body = JSON.parse(text);
    } catch (err) {
      setError({ code: 'invalid_json', message: err.message });
      return;
    }
    setError(null);
    if (await act(() => api.patch(s.id, body))) setDirty(false);
  };
  return html`<details class="settings">
    <summary>Settings (PATCH)</summary>
    <form onSubmit=${save}>
      <label for="settings-json">Params and policies, applied from the next turn (JSON; any subset)</label>
      <textarea
        id="settings-json"
        class="mono"
        rows="12"
        value=${text}
        onInput=${(e) => {
          setText(e.currentTarget.value);
          setDirty(true);
        }}
      ></textarea>
      <${ErrorNote} error=${error} />
      <div class="row">
        <button type="submit" class="primary" disabled=${busy}>Save settings</button>
        <button
          type="button"
          onClick=${() => {
            setText(current());
            setDirty(false);
          }}
        >
          Reset
        </button>
      </div>
    </form>
  </details>`;
}

function EventsPanel({ model }) {
  // Listed only while open: a closed panel costs nothing while deltas stream.
  const [open, setOpen] = useState(false);
  const events = model.events;
  const shown = open ? events.slice(-PANEL_EVENTS) : [];
  return html`<details class="events" onToggle=${(e) => setOpen(e.currentTarget.open)}>
    <summary>
      Raw events
      <span class="muted event-count" data-count=${events.length}
        >(${events.length}${events.length ? `, last ${events.at(-1).id}` : ''})</span
      >
    </summary>
    ${open && events.length > shown.length && html`<p class="muted">Showing the last ${shown.length}.</p>`}
    <ol class="event-list">
      ${shown.map(
        (ev) =>
          html`<li key=${ev.id} data-id=${ev.id} data-type=${ev.type}>
            <details>
              <summary>
                <code class="eid">${ev.id}</code> <strong>${ev.type}</strong>${' '}<span class="muted"
                  >${eventSummary(ev)}</span
                >
              </summary>
              <pre>${pretty(ev)}</pre>
            </details>
          </li>`,
      )}
    </ol>
  </details>`;
}
