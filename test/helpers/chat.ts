/**
 * The `ai` package's chat machinery on a plain state (what @ai-sdk/react's useChat keeps in React state): for the
 * Node tests and the browser page of test/chat/chat.test.ts (bundled with esbuild). Also the stream reader the tests use.
 */
import {
  AbstractChat,
  DefaultChatTransport,
  readUIMessageStream,
  type ChatInit,
  type ChatState,
  type ChatStatus,
  type UIMessage,
  type UIMessageChunk,
} from 'ai';

class PlainState implements ChatState<UIMessage> {
  private current: UIMessage[];
  private state: ChatStatus = 'ready';
  error: Error | undefined = undefined;
  constructor(
    messages: UIMessage[],
    private readonly changed: () => void,
  ) {
    this.current = messages;
  }
  get messages() {
    return this.current;
  }
  set messages(m: UIMessage[]) {
    this.current = m;
    this.changed();
  }
  get status() {
    return this.state;
  }
  set status(s: ChatStatus) {
    this.state = s;
    this.changed();
  }
  pushMessage = (m: UIMessage) => {
    this.messages = [...this.current, m];
  };
  popMessage = () => {
    this.messages = this.current.slice(0, -1);
  };
  replaceMessage = (i: number, m: UIMessage) => {
    this.messages = [...this.current.slice(0, i), m, ...this.current.slice(i + 1)];
  };
  snapshot = <T>(v: T): T => structuredClone(v);
}

/** `Chat` without a UI framework: its messages are a plain array; `nextFinish()` waits for a response's end. */
export class PlainChat extends AbstractChat<UIMessage> {
  private readonly waiting: Array<(m: UIMessage) => void> = [];
  constructor(
    init: Omit<ChatInit<UIMessage>, 'state' | 'onFinish'> & {
      messages?: UIMessage[];
      /** Called on every change of the messages or the status (where a UI framework would re-render). */
      onChange?: () => void;
    },
  ) {
    const { messages, onChange, ...rest } = init;
    const waiting: Array<(m: UIMessage) => void> = [];
    super({
      ...rest,
      state: new PlainState(messages ?? [], () => onChange?.()),
      onFinish: ({ message }) => waiting.splice(0).forEach((w) => w(message)),
    });
    this.waiting = waiting;
  }

  /** The message of the `n`th response to finish from now (call it before the action that sends). */
  nextFinish(n = 1): Promise<UIMessage> {
    return new Promise((resolve) => {
      let left = n;
      const one = (m: UIMessage) => (--left === 0 ? resolve(m) : this.waiting.push(one));
      this.waiting.push(one);
    });
  }
}

/** The transport a chat UI points at the service: `${base}/v1/chat`, the key as a bearer header. */
export const chatTransport = (base: string, key?: string) =>
  new DefaultChatTransport({
    api: `${base}/v1/chat`,
    ...(key ? { headers: { authorization: `Bearer ${key}` } } : {}),
  });

/**
 * A raw `POST /v1/chat` of `messages` for chat `id`, as `useChat`'s transport sends a new message ("submit-message"):
 * the answer's chunk stream.
 */
export const submitRaw = (base: string, key: string, id: string, messages: UIMessage[], messageId?: string) =>
  chatTransport(base, key).sendMessages({
    chatId: id,
    messages,
    trigger: 'submit-message',
    messageId,
    abortSignal: undefined,
  });

/** Reads a chunk stream to its end: every chunk, and the message `readUIMessageStream` built of them. */
export async function readAll(stream: ReadableStream<UIMessageChunk>, message?: UIMessage) {
  const [forChunks, forMessage] = stream.tee();
  const chunks: UIMessageChunk[] = [];
  const collect = (async () => {
    for await (const c of forChunks) chunks.push(c);
  })();
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream: forMessage, ...(message ? { message } : {}) }))
    last = m;
  await collect;
  return { chunks, message: last };
}

/** The `data:` payloads of a UI message stream's raw SSE text, in order (the last is `[DONE]`). */
export const sseDataLines = (body: string): string[] =>
  body
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => l.slice(6));
