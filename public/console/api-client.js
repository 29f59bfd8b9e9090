// The console's door to the service through the typed client's browser build (`toolrunner-sessions/client`,
// served as /console/vendor/client.js): the same interface as api.js. REST calls are the client's methods; follow()
// is the client's follow() (resumed from the last event, exactly once) plus what a page needs around it: the
// connection's state for the person, and a hold while the browser is offline.

import { ApiError, compareIds } from './api-shared.js';
import { SessionsClient } from './vendor/client.js';

export { ApiError, compareIds };

/** The client's errors as the console shows them: status, code, message. */
function asApiError(err) {
  if (typeof err?.status === 'number' && typeof err?.code === 'string')
    return new ApiError(err.status, err.code, err.message, err.details);
  return new ApiError(0, 'network_error', `The service cannot be reached (${err?.message ?? err}).`);
}

/**
 * @param {() => string} getKey the bearer key, read on every call (the person may change it)
 */
export function createApi(getKey) {
  /**
   * A read that hangs (a stalled socket, a request queued behind the browser's per-host connection limit) is given
   * up after GET_TIMEOUT_MS, so a view that polls reads again instead of waiting on it forever (as api.js does).
   */
  const GET_TIMEOUT_MS = 10_000;
  const timedFetch = (req) =>
    req.method === 'GET' ? fetch(req, { signal: AbortSignal.timeout(GET_TIMEOUT_MS) }) : fetch(req);
  let client = null;
  let clientKey = null;
  const c = (WebSocketClass) => {
    const key = getKey();
    if (WebSocketClass)
      return new SessionsClient({
        baseUrl: location.origin,
        apiKey: key || undefined,
        WebSocket: WebSocketClass,
      });
    if (!client || key !== clientKey) {
      client = new SessionsClient({ baseUrl: location.origin, apiKey: key || undefined, fetch: timedFetch });
      clientKey = key;
    }
    return client;
  };
  const call = async (fn) => {
    try {
      return await fn(c());
    } catch (err) {
      throw asApiError(err);
    }
  };

  return {
    tools: () => call((x) => x.listTools()),
    listSessions: ({ limit = 50, status, metadata } = {}) =>
      call((x) =>
        x.listSessions({
          limit,
          ...(status ? { status } : {}),
          ...(metadata ? { [`metadata.${metadata.key}`]: metadata.value } : {}),
        }),
      ),
    getSession: (id) => call((x) => x.getSession(id)),
    messages: (id) => call((x) => x.listMessages(id)),
    iterations: (id) => call((x) => x.listIterations(id)),
    children: (id) => call((x) => x.listChildren(id)),
    events: (id, after, limit = 1000) =>
      call((x) => x.listEvents(id, { limit, ...(after ? { after } : {}) })),
    create: (body) => call((x) => x.createSession(body)),
    addMessage: (id, text, interrupt) => call((x) => x.addMessage(id, { text, interrupt })),
    decide: (id, toolUseId, body) => call((x) => x.decideToolCall(id, toolUseId, body)),
    putResult: (id, toolUseId, body) => call((x) => x.putToolResult(id, toolUseId, body)),
    postResults: (id, body) => call((x) => x.submitToolResults(id, body)),
    continue: (id) => call((x) => x.continueSession(id)),
    patch: (id, body) => call((x) => x.updateSession(id, body)),
    retry: (id, body) => call((x) => x.retrySession(id, body ?? {})),
    cancel: (id) => call((x) => x.cancelSession(id)),
    resume: (id) => call((x) => x.resumeSession(id)),
    compact: (id) => call((x) => x.compactSession(id)),
    fork: (id, atIteration) => call((x) => x.forkSession(id, { at_iteration: atIteration })),
    remove: (id) => call((x) => x.deleteSession(id)),
    follow: (id, handlers) => follow(id, c, handlers),
  };
}

const onceOnline = () =>
  new Promise((resolve) => window.addEventListener('online', () => resolve(), { once: true }));

/**
 * Follows a session's events with the client's follow(): every event after `after`, then live ones, each once, in
 * order, resumed after a lost connection from the last one delivered. The connection's state goes to `onState`
 * (`connecting`, `live`, `offline`, `expired`, `ended`, `closed`, `error`). While the browser says it is offline the
 * socket is dropped and nothing is tried; the `online` event resumes from the last event.
 */
function follow(id, clientFor, { after, onEvent, onState }) {
  let last = after ?? undefined;
  let closed = false;
  let controller = null;
  let socket = null;

  // The client opens its sockets through this class: the console learns when one opens or closes.
  class TrackedWebSocket extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols);
      track(this);
    }
  }
  function track(ws) {
    socket = ws;
    onState('connecting');
    ws.addEventListener('open', () => socket === ws && !closed && onState('live'));
    ws.addEventListener('close', () => socket === ws && !closed && onState('offline'));
  }
  const client = clientFor(TrackedWebSocket);

  const goOffline = () => {
    // A lost network does not always close a WebSocket at once (an emulated one may never): stop following; the
    // loop below waits for `online`.
    controller?.abort();
  };
  window.addEventListener('offline', goOffline);

  (async () => {
    while (!closed) {
      if (!navigator.onLine) {
        onState('offline');
        await onceOnline();
        continue;
      }
      controller = new AbortController();
      try {
        for await (const ev of client.follow(id, { after: last, signal: controller.signal })) {
          last = ev.id;
          onEvent(ev);
        }
        if (!closed) onState('ended');
        return;
      } catch (err) {
        if (closed) return;
        if (controller.signal.aborted) continue;
        if (err?.code === 'cursor_expired') {
          last = err.details?.last_event_id ?? undefined;
          onState('expired', err);
          continue;
        }
        onState('error', asApiError(err));
        return;
      }
    }
  })();

  return {
    get lastEventId() {
      return last;
    },
    close() {
      closed = true;
      window.removeEventListener('offline', goOffline);
      controller?.abort();
      onState('closed');
    },
  };
}
