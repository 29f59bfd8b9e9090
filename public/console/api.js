// The console's only door to the service: REST with the bearer key, and `follow()`, the session's event stream
// over a WebSocket that reconnects from the last event it saw. Everything here is the public API (docs/API.md);
// swapping this module for the typed client's browser build changes nothing else.

import { ApiError, compareIds } from './api-shared.js';

export { ApiError, compareIds };

/**
 * @param {() => string} getKey the bearer key, read on every request (the person may change it)
 */
export function createApi(getKey) {
  /**
   * A read that hangs (a stalled socket, a request queued behind the browser's per-host connection limit) is given
   * up after GET_TIMEOUT_MS, so a view that polls reads again instead of waiting on it forever.
   */
  const GET_TIMEOUT_MS = 10_000;
  async function request(method, path, body) {
    const key = getKey();
    const headers = {};
    if (key) headers.authorization = `Bearer ${key}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res;
    try {
      res = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: method === 'GET' ? AbortSignal.timeout(GET_TIMEOUT_MS) : undefined,
      });
    } catch (err) {
      throw new ApiError(0, 'network_error', `The service cannot be reached (${err.message}).`);
    }
    const text = await res.text();
    let parsed;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = null;
    }
    if (!res.ok) {
      const e = parsed?.error;
      throw new ApiError(res.status, e?.code ?? 'http_error', e?.message ?? `HTTP ${res.status}`, e?.details);
    }
    return parsed;
  }

  const s = (id) => `/v1/sessions/${encodeURIComponent(id)}`;
  const t = (id) => encodeURIComponent(id);

  return {
    request,
    tools: () => request('GET', '/v1/tools'),
    listSessions: ({ limit = 50, status, metadata } = {}) => {
      const q = new URLSearchParams({ limit: String(limit) });
      if (status) q.set('status', status);
      if (metadata) q.set(`metadata.${metadata.key}`, metadata.value);
      return request('GET', `/v1/sessions?${q}`);
    },
    getSession: (id) => request('GET', s(id)),
    messages: (id) => request('GET', `${s(id)}/messages`),
    iterations: (id) => request('GET', `${s(id)}/iterations`),
    children: (id) => request('GET', `${s(id)}/children`),
    events: (id, after, limit = 1000) =>
      request('GET', `${s(id)}/events?limit=${limit}${after ? `&after=${encodeURIComponent(after)}` : ''}`),
    create: (body) => request('POST', '/v1/sessions', body),
    addMessage: (id, text, interrupt) => request('POST', `${s(id)}/messages`, { text, interrupt }),
    decide: (id, toolUseId, body) => request('POST', `${s(id)}/tool-calls/${t(toolUseId)}`, body),
    putResult: (id, toolUseId, body) => request('PUT', `${s(id)}/tool-results/${t(toolUseId)}`, body),
    postResults: (id, body) => request('POST', `${s(id)}/tool-results`, body),
    continue: (id) => request('POST', `${s(id)}/continue`),
    patch: (id, body) => request('PATCH', s(id), body),
    retry: (id, body) => request('POST', `${s(id)}/retry`, body),
    cancel: (id) => request('POST', `${s(id)}/cancel`),
    resume: (id) => request('POST', `${s(id)}/resume`),
    compact: (id) => request('POST', `${s(id)}/compact`),
    fork: (id, atIteration) => request('POST', `${s(id)}/fork`, { at_iteration: atIteration }),
    remove: (id) => request('DELETE', s(id)),
    follow: (id, handlers) => follow(id, getKey, handlers),
  };
}

/** Reconnection delays (ms): doubled after each failed attempt, up to the last. */
const BACKOFF_MS = [250, 500, 1000, 2000, 4000, 8000];

/**
 * Follows a session's events: replays every event after `after`, then live ones, each delivered once, in order.
 * After a network loss it reconnects with the id of the last event delivered, so nothing is missed or repeated
 * (the server sends each event once per connection; ids at or before the last are dropped all the same).
 * While the browser says it is offline it does not try; the `online` event reconnects at once.
 *
 * @param {{after?: string, onEvent: (ev: object) => void, onState: (state: string, detail?: object) => void}} h
 *   states: `connecting`, `live`, `offline` (reconnecting), `expired` (the cursor was trimmed: reload),
 *   `ended` (the session was deleted), `closed`.
 */
function follow(id, getKey, { after, onEvent, onState }) {
  let last = after ?? null;
  let ws = null;
  let closed = false;
  let timer = null;
  let attempt = 0;

  const schedule = () => {
    clearTimeout(timer);
    if (closed || !navigator.onLine) return;
    timer = setTimeout(open, BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)]);
    attempt++;
  };

  function open() {
    if (closed || ws) return;
    clearTimeout(timer);
    const url = new URL(`/v1/sessions/${encodeURIComponent(id)}/stream`, location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    if (last) url.searchParams.set('after', last);
    const key = getKey();
    onState('connecting');
    const sock = key ? new WebSocket(url, ['bearer', key]) : new WebSocket(url);
    ws = sock;
    sock.onopen = () => {
      attempt = 0;
      onState('live');
    };
    sock.onmessage = (m) => {
      if (ws !== sock) return;
      let frame;
      try {
        frame = JSON.parse(m.data);
      } catch {
        return;
      }
      if (typeof frame.id === 'string' && typeof frame.session_id === 'string') {
        if (last && compareIds(frame.id, last) <= 0) return;
        last = frame.id;
        onEvent(frame);
      } else if (frame.type === 'error' && frame.error?.code === 'cursor_expired') {
        // The log was trimmed past our cursor: start over from the durable history.
        last = frame.error.details?.last_event_id ?? null;
        onState('expired', frame.error);
      }
    };
    sock.onclose = (e) => {
      if (ws !== sock) return;
      ws = null;
      if (closed) return;
      if (e.code === 1000) {
        closed = true;
        onState('ended');
        return;
      }
      onState('offline', { code: e.code });
      schedule();
    };
  }

  const goOffline = () => {
    // A lost network does not always close a WebSocket at once (and emulated offline modes may not close it at
    // all): drop it ourselves; the `online` event (or the backoff) reconnects from `last`.
    const sock = ws;
    ws = null;
    clearTimeout(timer);
    if (sock) sock.close();
    if (!closed) onState('offline');
  };
  const goOnline = () => {
    attempt = 0;
    if (!ws) open();
  };
  window.addEventListener('offline', goOffline);
  window.addEventListener('online', goOnline);
  if (navigator.onLine) open();
  else onState('offline');

  return {
    get lastEventId() {
      return last;
    },
    close() {
      closed = true;
      clearTimeout(timer);
      window.removeEventListener('offline', goOffline);
      window.removeEventListener('online', goOnline);
      const sock = ws;
      ws = null;
      if (sock) sock.close();
      onState('closed');
    },
  };
}
