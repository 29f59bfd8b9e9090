/**
 * Message threads (`message-threads-2026-08-12`): the checks a `thread: {type: "continue"}` request must pass (the
 * store of threads is src/offline/threads.ts).
 */
import type { StoredThread } from '../../src/offline/threads.js';
import { RequestError, type Unchecked } from './validate.js';

/** Throws the API's error when `thread` cannot be used: unsupported, unknown, already continued, or in flight. */
export function checkThread(
  thread: Unchecked<'type' | 'previous_message_id'>,
  parent: StoredThread | undefined,
  newMessages: readonly unknown[],
  supported: boolean,
): void {
  if (!supported) {
    throw new RequestError({
      status: 400,
      type: 'invalid_request_error',
      message: 'thread: message threads are not supported for this request',
      details: { error_code: 'thread_unsupported_request', unsupported: ['thread'] },
    });
  }
  if (thread.type === 'create') return;
  if (parent === undefined) {
    throw new RequestError({
      status: 404,
      type: 'not_found_error',
      message: `thread.previous_message_id: no stored message thread ends with ${String(thread.previous_message_id)}`,
      details: { error_code: 'thread_not_found' },
    });
  }
  if (parent.continued) {
    throw new RequestError({
      status: 400,
      type: 'invalid_request_error',
      message: `thread.previous_message_id: ${String(thread.previous_message_id)} has already been continued; continue from the latest message of the thread`,
      details: { error_code: 'thread_already_continued' },
    });
  }
  if (parent.inFlight) {
    throw new RequestError({
      status: 400,
      type: 'invalid_request_error',
      message: `thread.previous_message_id: another request is already continuing ${String(thread.previous_message_id)}`,
      details: { error_code: 'thread_continue_in_flight' },
    });
  }
  if (newMessages.length === 0 && parent.stopReason !== 'pause_turn' && parent.stopReason !== 'compaction') {
    throw new RequestError({
      status: 400,
      type: 'invalid_request_error',
      message: 'messages: at least one message is required',
    });
  }
}
