// The console's shell: the key (kept in sessionStorage, never in a URL), the tenant's sessions, the form that
// creates one, and the hash route (#/sessions/<id>) that opens a session (session.js).

import { render } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { SessionView } from './session.js';
import { ErrorNote, KEY_STORAGE, StatusBadge, api, html, readKey } from './ui.js';
import {
  ago,
  formatCost,
  matchesSearch,
  parseSearch,
  sessionCost,
  sessionTitle,
  totalTokens,
} from './view.js';

/** How often the session list is read again while the page is visible (ms). */
const LIST_POLL_MS = 2000;

function useRoute() {
  const parse = () => {
    const m = /^#\/sessions\/([A-Za-z0-9_-]+)$/.exec(location.hash);
    return m ? { session: m[1] } : { session: null };
  };
  const [route, setRoute] = useState(parse);
  useEffect(() => {
    const on = () => setRoute(parse());
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return route;
}

function KeyBar({ keySet, onSave, onForget }) {
  const [value, setValue] = useState('');
  const submit = (e) => {
    e.preventDefault();
    onSave(value.trim());
    setValue('');
  };
  return html`<form class="keybar" onSubmit=${submit} aria-label="API key">
    <label for="api-key">API key</label>
    <input
      id="api-key"
      type="password"
      autocomplete="off"
      spellcheck="false"
      placeholder=${keySet ? 'a key is set (paste another to change it)' : 'paste the bearer key'}
      value=${value}
      onInput=${(e) => setValue(e.currentTarget.value)}
    />
    <button type="submit">Use key</button>
    ${keySet && html`<button type="button" onClick=${onForget}>Forget key</button>`}
  </form>`;
}

/**
 * The tenant's sessions, read every LIST_POLL_MS (and when a session changes). `open`: `{id, status}` of the session
 * shown beside the list, whose status its view follows live: shown for it instead of the one read last.
 */
function SessionList({ current, version, onError, open }) {
  const [sessions, setSessions] = useState(null);
  const [filter, setFilter] = useState('');
  const [query, setQuery] = useState('');
  const search = parseSearch(query);
  /** The server's metadata filter (`key=value`), as one string: the list is read again when it changes. */
  const metaKey = search?.metadata ? `${search.metadata.key}=${search.metadata.value}` : '';
  useEffect(() => {
    let stopped = false;
    let timer = null;
    const load = async () => {
      clearTimeout(timer);
      // Not while hidden or offline: nobody looks, or the request would only fail.
      if (document.visibilityState === 'visible' && navigator.onLine) {
        try {
          const page = await api.listSessions({
            limit: 50,
            status: filter || undefined,
            metadata: search?.metadata,
          });
          if (!stopped) {
            setSessions(page.data);
            onError(null);
          }
        } catch (err) {
          if (!stopped) onError(err);
        }
      }
      if (!stopped) timer = setTimeout(load, LIST_POLL_MS);
    };
    load();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [filter, metaKey, version]);
  const now = Date.now();
  const shown = sessions && search?.text ? sessions.filter((s) => matchesSearch(s, search.text)) : sessions;
  return html`<nav class="sessions" aria-label="Sessions">
    <div class="sessions-head">
      <h2>Sessions</h2>
      <label class="inline"
        >Status
        <select value=${filter} onChange=${(e) => setFilter(e.currentTarget.value)}>
          <option value="">all</option>
          ${['running', 'requires_action', 'idle', 'failed'].map((s) => html`<option value=${s}>${s}</option>`)}
        </select>
      </label>
    </div>
    <input
      class="session-search"
      type="search"
      aria-label="Search sessions"
      placeholder="id, title, or key=value"
      title="Text filters the sessions listed by id, title and metadata; key=value asks the service (metadata.key)"
      value=${query}
      onInput=${(e) => setQuery(e.currentTarget.value)}
    />
    <a class="button new-session" href="#/">New session</a>
    ${
      shown === null
        ? html`<p class="muted">Loading…</p>`
        : shown.length === 0
          ? html`<p class="muted">${search ? 'No session matches.' : 'No sessions yet.'}</p>`
          : html`<ul class="session-list">
              ${shown.map((listed) => {
                const s = open?.id === listed.id ? { ...listed, status: open.status } : listed;
                return html`<li key=${s.id} data-session=${s.id} data-status=${s.status}>
                  <a href=${`#/sessions/${s.id}`} aria-current=${s.id === current ? 'page' : undefined}>
                    ${sessionTitle(s) ? html`<span class="title">${sessionTitle(s)}</span>` : ''}
                    <span class="sid">${s.id}</span>
                    <${StatusBadge} status=${s.status} />
                    <span class="meta">${listMeta(s, now)}</span>
                  </a>
                </li>`;
              })}
            </ul>`
    }
  </nav>`;
}

/** "3 turns · 1,204 tokens · $0.0042 · 5 s ago" */
function listMeta(s, now) {
  return [
    `${s.iteration} turn${s.iteration === 1 ? '' : 's'}`,
    `${totalTokens(s.usage).toLocaleString()} tokens`,
    formatCost(sessionCost(s)),
    ago(s.updated_at, now),
  ].join(' · ');
}

const APPROVALS = ['default', 'never', 'always', 'some'];

function NewSession({ onCreated }) {
  const [tools, setTools] = useState([]);
  const [form, setForm] = useState({
    input: '',
    system: '',
    model: '',
    max_tokens: '',
    chosen: [],
    clientTools: '',
    approval: 'default',
    approvalList: '',
    review: 'false',
    on_tool_error: 'continue',
    max_iterations: '10',
    stream: true,
  });
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    api.tools().then(
      (r) => setTools(r.data ?? r.tools ?? []),
      (err) => setError(err),
    );
  }, []);
  const set = (k) => (e) =>
    setForm({
      ...form,
      [k]: e.currentTarget.type === 'checkbox' ? e.currentTarget.checked : e.currentTarget.value,
    });
  const toggleTool = (name) => (e) =>
    setForm({
      ...form,
      chosen: e.currentTarget.checked ? [...form.chosen, name] : form.chosen.filter((n) => n !== name),
    });

  const submit = async (e) => {
    e.preventDefault();
    setError(null);
    let body;
    try {
      const client = form.clientTools.trim() ? JSON.parse(form.clientTools) : [];
      const list = (s) =>
        s
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean);
      body = {
        tools: [...form.chosen, ...(Array.isArray(client) ? client : [client])],
        approval: form.approval === 'some' ? list(form.approvalList) : form.approval,
        review_tool_results:
          form.review === 'true' ? true : form.review === 'false' ? false : list(form.review),
        on_tool_error: form.on_tool_error,
        max_iterations: Number(form.max_iterations),
        stream: form.stream,
      };
      if (form.input.trim()) body.input = form.input;
      if (form.system.trim()) body.system = form.system;
      if (form.model.trim()) body.model = form.model.trim();
      if (form.max_tokens.trim()) body.max_tokens = Number(form.max_tokens);
    } catch (err) {
      setError({ code: 'invalid_json', message: `Client tools: ${err.message}` });
      return;
    }
    setBusy(true);
    try {
      const s = await api.create(body);
      onCreated(s);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return html`<section class="panel new-form" aria-labelledby="new-title">
    <h2 id="new-title">New session</h2>
    <form onSubmit=${submit}>
      <label for="new-input">First message</label>
      <textarea
        id="new-input"
        rows="3"
        value=${form.input}
        onInput=${set('input')}
        placeholder="What is the weather in Paris?"
      ></textarea>
      <label for="new-system">System prompt</label>
      <textarea id="new-system" rows="2" value=${form.system} onInput=${set('system')}></textarea>
      <fieldset>
        <legend>Server tools</legend>
        ${tools.length === 0 && html`<p class="muted">No server tools listed.</p>`}
        ${tools.map(
          (t) =>
            html`<label class="check" key=${t.name}>
              <input
                type="checkbox"
                name="tool"
                value=${t.name}
                checked=${form.chosen.includes(t.name)}
                onChange=${toggleTool(t.name)}
              />
              <span><code>${t.name}</code> <span class="muted">${t.description ?? ''}</span></span>
            </label>`,
        )}
      </fieldset>
      <label for="new-client-tools"
        >Client tools (JSON: a tool or an array of <code>{name, description, input_schema}</code>)</label
      >
      <textarea
        id="new-client-tools"
        rows="3"
        class="mono"
        value=${form.clientTools}
        onInput=${set('clientTools')}
        placeholder='[{"name": "lookup_order", "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}}]'
      ></textarea>
      <div class="grid2">
        <div>
          <label for="new-approval">Approval</label>
          <select id="new-approval" value=${form.approval} onChange=${set('approval')}>
            ${APPROVALS.map((a) => html`<option value=${a}>${a === 'some' ? 'named tools…' : a}</option>`)}
          </select>
          ${
            form.approval === 'some' &&
            html`<input
              aria-label="Tools needing approval (comma-separated)"
              value=${form.approvalList}
              onInput=${set('approvalList')}
              placeholder="get_weather, calculate_sum"
            />`
          }
        </div>
        <div>
          <label for="new-review">Review tool results</label>
          <input
            id="new-review"
            value=${form.review}
            onInput=${set('review')}
            title="true, false, or tool names separated by commas"
          />
        </div>
        <div>
          <label for="new-on-error">On tool error</label>
          <select id="new-on-error" value=${form.on_tool_error} onChange=${set('on_tool_error')}>
            ${['continue', 'pause', 'fail'].map((v) => html`<option value=${v}>${v}</option>`)}
          </select>
        </div>
        <div>
          <label for="new-max-iterations">Max iterations</label>
          <input
            id="new-max-iterations"
            type="number"
            min="1"
            max="1000"
            value=${form.max_iterations}
            onInput=${set('max_iterations')}
          />
        </div>
        <div>
          <label for="new-model">Model</label>
          <input id="new-model" value=${form.model} onInput=${set('model')} placeholder="service default" />
        </div>
        <div>
          <label for="new-max-tokens">Max tokens</label>
          <input
            id="new-max-tokens"
            type="number"
            min="1"
            value=${form.max_tokens}
            onInput=${set('max_tokens')}
            placeholder="service default"
          />
        </div>
      </div>
      <label class="check"
        ><input type="checkbox" checked=${form.stream} onChange=${set('stream')} /> Stream turns</label
      >
      <${ErrorNote} error=${error} />
      <button type="submit" class="primary" disabled=${busy}>Create session</button>
    </form>
  </section>`;
}

/** Whether the person chose to go on without a key (a service without API_KEYS), for this tab. */
const OPEN_STORAGE = 'toolrunner-sessions.open';

/** The session a client token was given for (with the token as the tab's bearer): the console shows only it. */
const TOKEN_SESSION_STORAGE = 'toolrunner-sessions.token-session';

/**
 * `/console#session=ses_…&token=ct_…` (docs/API.md "Client tokens"): a page handed a client token for one session.
 * A fragment never reaches the server; the token moves to this tab's sessionStorage at once and the address bar
 * keeps only the session's route, so the token is not left in the history or in a copied link.
 */
function takeFragmentToken() {
  const p = new URLSearchParams(location.hash.slice(1));
  const session = p.get('session');
  const token = p.get('token');
  if (!session || !token || !/^ses_[A-Za-z0-9]+$/.test(session) || !/^ct_[A-Za-z0-9_-]+$/.test(token)) return;
  sessionStorage.setItem(KEY_STORAGE, token);
  sessionStorage.setItem(TOKEN_SESSION_STORAGE, session);
  history.replaceState(null, '', `${location.pathname}${location.search}#/sessions/${session}`);
}

/** The session of the tab's client token, or null when the tab holds a key (or nothing). */
const tokenSession = () =>
  readKey().startsWith('ct_') ? sessionStorage.getItem(TOKEN_SESSION_STORAGE) : null;

/** A tab holding a client token: its one session, nothing else (the token opens nothing else). */
function TokenApp({ session, onForget }) {
  return html`<header class="top">
      <h1>Session</h1>
      <p class="token-note">
        Opened with a client token for this session only.
        <button type="button" onClick=${onForget}>Forget token</button>
      </p>
    </header>
    <main id="main" class="layout single">
      <${SessionView} id=${session} onChange=${() => {}} />
    </main>`;
}

function App() {
  const route = useRoute();
  const [keySet, setKeySet] = useState(() => readKey() !== '');
  const [tokenFor, setTokenFor] = useState(tokenSession);
  const [open, setOpen] = useState(() => sessionStorage.getItem(OPEN_STORAGE) === '1');
  /** Bumped when the key changes: views start over with it. */
  const [keyVersion, setKeyVersion] = useState(0);
  /** Bumped when a session changes: the list is read again at once. */
  const [version, setVersion] = useState(0);
  const [listError, setListError] = useState(null);
  /** `{id, status}` of the session open beside the list, as its view follows it. */
  const [openStatus, setOpenStatus] = useState(null);
  const onStatus = useCallback((id, status) => setOpenStatus({ id, status }), []);
  const onListError = useCallback((err) => setListError(err), []);
  const bump = () => setVersion((v) => v + 1);
  const rekey = () => {
    setKeyVersion((v) => v + 1);
    bump();
  };
  const saveKey = (k) => {
    if (k) sessionStorage.setItem(KEY_STORAGE, k);
    setTokenFor(tokenSession());
    setKeySet(readKey() !== '');
    rekey();
  };
  const forget = () => {
    sessionStorage.removeItem(KEY_STORAGE);
    sessionStorage.removeItem(OPEN_STORAGE);
    sessionStorage.removeItem(TOKEN_SESSION_STORAGE);
    setTokenFor(null);
    setKeySet(false);
    setOpen(false);
    rekey();
  };
  const goOpen = () => {
    sessionStorage.setItem(OPEN_STORAGE, '1');
    setOpen(true);
    rekey();
  };
  if (tokenFor) return html`<${TokenApp} session=${tokenFor} onForget=${forget} />`;
  // Nothing is asked of the API before a key is given (or declared unneeded): no 401 in the console.
  const ready = keySet || open;
  return html`<header class="top">
      <h1><a href="#/">Sessions console</a></h1>
      <${KeyBar} keySet=${keySet} onSave=${saveKey} onForget=${forget} />
    </header>
    ${
      listError &&
      listError.status === 401 &&
      html`<p class="error banner" role="alert">The key is missing or wrong: paste a valid API key.</p>`
    }
    ${
      ready
        ? html`<div class="layout">
            <${SessionList}
              current=${route.session}
              version=${version}
              onError=${onListError}
              open=${route.session && openStatus?.id === route.session ? openStatus : null}
            />
            <main id="main">
              ${
                route.session
                  ? html`<${SessionView}
                      key=${`${route.session}:${keyVersion}`}
                      id=${route.session}
                      onChange=${bump}
                      onStatus=${onStatus}
                    />`
                  : html`<${NewSession}
                      key=${keyVersion}
                      onCreated=${(s) => {
                        bump();
                        location.hash = `#/sessions/${s.id}`;
                      }}
                    />`
              }
            </main>
          </div>`
        : html`<main id="main" class="layout single">
            <section class="panel">
              <h2>Paste an API key</h2>
              <p>
                The console speaks the service's public API with a bearer key from <code>API_KEYS</code>. The
                key stays in this tab's session storage: it is sent only to this service, never put in a URL,
                and forgotten when the tab closes.
              </p>
              <p>A service started without <code>API_KEYS</code> (loopback only) needs no key:</p>
              <button type="button" onClick=${goOpen}>Continue without a key</button>
            </section>
          </main>`
    }`;
}

takeFragmentToken();
const root = document.getElementById('app');
root.textContent = '';
render(html`<${App} />`, root);
