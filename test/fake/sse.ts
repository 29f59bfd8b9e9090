/**
 * The SSE writer: a message as the API streams it (`message_start`, blocks of deltas, `message_delta`,
 * `message_stop`), paced event by event, in the wire's framing (SSE text, or Bedrock's binary frames), and the scripted failures of a stream (a cut socket, an `event: error`).
 */
import type http from 'node:http';
import { DEFAULT_ERROR_MESSAGES, errorBody, shortId } from './respond.js';
import { sseEvents } from '../../src/offline/sse-events.js';
import type { StreamFraming } from './provider-wires.js';
import type { FakeState } from './state.js';
import type { FakeMessageReply, FakeRequest, WireMessage } from '../../src/offline/wire.js';

/**
 * Streams `message` on `res` as `reply` scripts it. `store` runs once the message is complete (before
 * `message_stop` leaves); `fail` runs when the stream ends any other way.
 */
export function streamMessage(
  state: FakeState,
  res: http.ServerResponse,
  fr: FakeRequest,
  message: WireMessage,
  reply: FakeMessageReply,
  framing: StreamFraming,
  store: () => void,
  fail: () => void,
): void {
  const events = sseEvents(message);
  const beforeStop = events.length - 1;
  let count = events.length;
  let tail: 'end' | 'cut' | 'error' | 'hang' = 'end';
  if (reply.cutAfterEvents !== undefined) {
    tail = 'cut';
    count = clamp(reply.cutAfterEvents, 0, beforeStop);
  } else if (reply.hangAfterEvents !== undefined) {
    tail = 'hang';
    count = clamp(reply.hangAfterEvents, 1, beforeStop);
  } else if (reply.streamErrorAfterEvents !== undefined) {
    tail = 'error';
    count = clamp(reply.streamErrorAfterEvents, 0, beforeStop);
  }
  const errorEvent = () => {
    const type = reply.streamErrorType ?? 'overloaded_error';
    const text = reply.streamErrorMessage ?? DEFAULT_ERROR_MESSAGES[type] ?? type;
    return `event: error\ndata: ${errorBody(type, text)}\n\n`;
  };
  /** The last events (maybe none), then the stream's scripted end. */
  const finish = (last: string[]) => {
    const chunk = last.length ? framing.encode(last) : '';
    if (tail === 'end') {
      // Stored before `message_stop` leaves, so a client that continues at once finds the thread.
      store();
      res.end(chunk);
    } else if (tail === 'hang') {
      // The reply is never complete: nothing is stored; the socket stays open until the client or `close` ends it.
      fail();
      if (last.length) res.write(chunk);
    } else if (tail === 'error') {
      fail();
      res.end(framing.encode([...last, errorEvent()]));
    } else {
      fail();
      if (last.length) res.write(chunk, () => res.socket?.destroy());
      else res.socket?.destroy();
    }
  };

  if (tail === 'cut' && count === 0) {
    // Before the headers: the SDK sees a connection error and retries it.
    fr.status = 0;
    fail();
    res.socket?.destroy();
    return;
  }
  fr.status = 200;
  res.writeHead(200, {
    'content-type': framing.contentType,
    'cache-control': 'no-cache',
    'request-id': `req_fake_${shortId()}`,
  });
  const delay = reply.eventDelayMs ?? state.pacing;
  // Held after this many events until the test resumes the fake (never when the stream ends before it).
  const pauseAt =
    reply.pauseAfterEvents !== undefined && tail === 'end'
      ? clamp(reply.pauseAfterEvents, 1, beforeStop)
      : null;
  // Headers leave at once, as from the real API; the events follow at the pace. A stream to hold goes event by event
  // even unpaced (a hold is not dropped for want of a pace: a test waiting on it would race the whole stream).
  if (delay > 0 || pauseAt !== null) res.flushHeaders();
  if (!(delay > 0) && pauseAt === null) {
    finish(events.slice(0, count));
    return;
  }
  // Each event is due `delay` after the previous one's due time, so K events take at least K * delay; an event whose
  // due time has passed (this process's timers fired late: the machine is busy) leaves at once, so a late timer
  // delays one event, not every event after it. The real API generates its tokens on its own machines: its pace does
  // not slow down with the client's load (before, each step waited `delay` after the last write, and a stream's
  // lateness only grew — on the bench's shared cores, with the load the service itself put on them).
  let i = 0;
  let due = performance.now() + delay;
  const step = () => {
    if (res.destroyed || state.closed) return fail();
    const wait = due - performance.now();
    if (wait > 0) return state.later(step, Math.ceil(wait));
    if (i >= count) return finish([]);
    if (i === count - 1) {
      i++;
      return finish([events[i - 1]!]);
    }
    res.write(framing.encode([events[i++]!]));
    due += delay;
    // Held as the event leaves (not at the next step): a client that has it can resume the stream at once.
    if (i === pauseAt) {
      return state.pause(() => {
        due = performance.now() + delay;
        state.later(step, delay);
      });
    }
    step();
  };
  // With no event to write first, only an `event: error` is left (a cut at 0 returned above).
  if (count === 0) state.later(() => (res.destroyed || state.closed ? fail() : finish([])), delay);
  else state.later(step, delay);
}

function clamp(value: number, min: number, max: number): number {
  return Math.max(min, Math.min(max, Math.floor(value)));
}
