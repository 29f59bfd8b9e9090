// The console's one door to the service: the typed client's browser build (`packages/client`, served as
// /console/vendor/client.js). REST calls are the client's methods, its errors are what the views show
// (`code`, `message`); follow() is the client's follow() (resumed from the last event, exactly once) plus what a
// page needs around it: the connection's state for the person, and a hold while the browser is offline.

import { ApiError, SessionsClient } from './vendor/client.js';

/**
 * A read that hangs (a stalled socket, a request queued behind the browser's per-host connection limit) is given
 * up after this long, so a view that polls reads again instead of waiting on it forever.
 */
const GET_TIMEOUT_MS = 10_000;

/** A session's children read at most this many pages of 100 (the tree polls them while a child works). */
const CHILDREN_MAX_PAGES = 10;

/** What a call threw, as the views show it: the service's error as is; anything else as `network_error`. */
function shown(err) {
  if (err instanceof ApiError) return err;
  return new ApiError(0, {
    code: 'network_error',
    message: `The service cannot be reached (${err?.message ?? err}).`,
  });
}

/**
 * @param {() => string} getKey the bearer key, read on every call (the person may change it)
 */
export function createApi(getKey) {
  let client = null;
  let clientKey = null;
  const current = () => {
    const key = getKey();
    if (!client || key !== clientKey) {
      client = new SessionsClient({
        baseUrl: location.origin,
        apiKey: key || undefined,
        readTimeoutMs: GET_TIMEOUT_MS,
      });
      clientKey = key;
    }
    return client;
  };
  const call = async (fn) => {
    try {
      return await fn(current());
    } catch (err) {
      throw shown(err);
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
    // Every page of the children (each call's child is shown under its call), up to CHILDREN_MAX_PAGES of them.
    children: (id) =>
      call(async (x) => {
        const data = [];
        let cursor;
        for (let n = 0; n < CHILDREN_MAX_PAGES; n++) {
          const page = await x.listChildren(id, { limit: 100, ...(cursor ? { cursor } : {}) });
          data.push(...page.data);
          if (!page.has_more) break;
          cursor = page.next_cursor;
        }
        return { data };
      }),
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
    follow: (id, handlers) => follow(current(), id, handlers),
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
function follow(client, id, { after, onEvent, onState }) {
  let last = after ?? undefined;
  let closed = false;
  /** Set once following is over (the session was deleted, or it cannot be followed): later closes are not news. */
  let over = false;
  let controller = null;
  const onConnection = (state) => {
    if (closed || over) return;
    if (state === 'connecting') onState('connecting');
    else if (state === 'open') onState('live');
    else onState('offline');
  };

  // A lost network does not always close a WebSocket at once (an emulated one may never): stop following; the
  // loop below waits for `online`.
  const goOffline = () => controller?.abort();
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
        for await (const ev of client.follow(id, { after: last, signal: controller.signal, onConnection })) {
          last = ev.id;
          onEvent(ev);
        }
        over = true;
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
        over = true;
        onState('error', shown(err));
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
