import type { TracerProvider } from '@opentelemetry/api';
import { WebSocket } from 'ws';
import { SessionsClient } from '../../packages/client/src/index.js';
import { startService, type Service } from '../../src/boot.js';
import { startFakeAnthropic, type FakeAnthropic, type FakeAnthropicOptions } from '../fake/server.js';
import { AnswerLog, recording } from './declared-statuses.js';
import { startTestRedis, type TestRedis } from './redis.js';
import { SessionChanges } from './session-changes.js';

export interface Harness {
  redis: TestRedis;
  fake: FakeAnthropic;
  service: Service;
  api: Api;
  /** The typed client (`toolrunner-sessions/client`) on this service, with the harness's key. */
  client: SessionsClient;
  /**
   * Every (method, route, status) the service answered; the file fails after its last test when openapi.json does
   * not declare one (test/helpers/declared-statuses.ts).
   */
  answers: AnswerLog;
  close(): Promise<void>;
}

/** The typed client of the service at `baseUrl` (Node 20 has no global WebSocket: the `ws` package's). */
export const clientFor = (baseUrl: string, apiKey?: string, extra: { maxRetries?: number } = {}) =>
  new SessionsClient({ baseUrl, apiKey, WebSocket, ...extra });

export interface ApiResponse<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

/** An event of a session's log as `GET /v1/sessions/:id/events` lists it. */
interface SessionEvent {
  id: string;
  type: string;
  at: string;
  data: any;
}

/** The slowest `Api.waitFor` reads a session when its event stream says nothing (lost, refused, quiet). */
const WAIT_POLL_MS = 1000;

/** A tiny JSON client of the service's REST API. */
export class Api {
  constructor(
    readonly base: string,
    readonly token?: string,
  ) {}

  as(token: string): Api {
    return new Api(this.base, token);
  }

  async req<T = any>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<ApiResponse<T>> {
    const res = await fetch(this.base + path, {
      method,
      headers: {
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    let parsed: any = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      /* not JSON */
    }
    return { status: res.status, body: parsed as T, headers: res.headers };
  }

  get = <T = any>(path: string, headers?: Record<string, string>) =>
    this.req<T>('GET', path, undefined, headers);
  post = <T = any>(path: string, body?: unknown, headers?: Record<string, string>) =>
    this.req<T>('POST', path, body ?? {}, headers);

  /**
   * Resolves with the session once `pred` holds: at once when the first read says so; else after each batch of its
   * event stream (`follow`).
   */
  async waitFor(id: string, pred: (s: any) => boolean, timeoutMs = 10_000): Promise<any> {
    let last: any;
    const found = await this.follow(id, timeoutMs, async () => {
      const r = await this.get(`/v1/sessions/${id}`);
      last = r.body;
      return r.status === 200 && pred(r.body) ? { session: r.body } : undefined;
    });
    if (found) return found.session;
    throw new Error(`timed out waiting for session ${id}; last: ${JSON.stringify(last)}`);
  }

  /** The first 1000 events of session `id`'s log, oldest first. */
  async events(id: string): Promise<SessionEvent[]> {
    return (await this.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
  }

  /** Resolves with the first event of `type` in session `id`'s log once there is one (`follow`). */
  async waitForEvent(id: string, type: string, timeoutMs = 15_000): Promise<SessionEvent> {
    const found = await this.follow(id, timeoutMs, async () =>
      (await this.events(id)).find((e) => e.type === type),
    );
    if (found) return found;
    throw new Error(`no ${type} event in session ${id} within ${timeoutMs} ms`);
  }

  /**
   * `read` until it returns something, or undefined once `timeoutMs` passed: at once, then after each batch session
   * `id`'s event stream delivers, and at least every WAIT_POLL_MS should the stream be lost or refused. The stream
   * replays the log from its start, so a change made between the first read and the subscription is not missed.
   */
  private async follow<T>(
    id: string,
    timeoutMs: number,
    read: () => Promise<T | undefined>,
  ): Promise<T | undefined> {
    const deadline = Date.now() + timeoutMs;
    let changes: SessionChanges | undefined;
    try {
      for (;;) {
        changes?.clear();
        const found = await read();
        if (found !== undefined) return found;
        const left = deadline - Date.now();
        if (left <= 0) return undefined;
        changes ??= new SessionChanges(this.base, this.token, id);
        await changes.next(Math.min(left, WAIT_POLL_MS));
      }
    } finally {
      changes?.close();
    }
  }

  waitStatus(id: string, status: string | string[], timeoutMs?: number) {
    const want = Array.isArray(status) ? status : [status];
    return this.waitFor(id, (s) => want.includes(s.status), timeoutMs);
  }
}

export interface HarnessOptions {
  env?: Record<string, string>;
  fake?: FakeAnthropicOptions;
  redis?: TestRedis;
  fakeServer?: FakeAnthropic;
  /** Spans go to this provider (an in-memory exporter) instead of one configured from `OTEL_*`. */
  tracerProvider?: TracerProvider;
}

/** A service in this process on a private redis-server and a fake upstream, on loopback ports. */
export async function startHarness(opts: HarnessOptions = {}): Promise<Harness> {
  const redis = opts.redis ?? (await startTestRedis());
  const fake = opts.fakeServer ?? (await startFakeAnthropic({ strictAlternation: true, ...opts.fake }));
  const answers = new AnswerLog('the harness service');
  const service = await recording(answers, () =>
    startService(
      {
        PORT: '0',
        HOST: '127.0.0.1',
        REDIS_URL: redis.url,
        ANTHROPIC_API_KEY: 'test-key',
        ANTHROPIC_BASE_URL: fake.url,
        LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'silent',
        LEASE_TTL_MS: '3000',
        // Tests read keys by their unprefixed names; test/store/redis-prefix.test.ts covers REDIS_KEY_PREFIX.
        REDIS_KEY_PREFIX: 'none',
        SHUTDOWN_GRACE_MS: '2000',
        UPSTREAM_MAX_RETRIES: '1',
        // The per-tenant rate limit is on by default; tests that check it set it themselves.
        RATE_LIMIT_PER_MIN: '0',
        ...opts.env,
      },
      opts.tracerProvider ? { tracerProvider: opts.tracerProvider } : {},
    ),
  );
  const token = opts.env?.['API_KEYS'] ? opts.env['API_KEYS'].split(',')[0]!.split(':')[1] : undefined;
  return {
    redis,
    fake,
    service,
    api: new Api(service.url, token),
    client: clientFor(service.url, token),
    answers,
    close: async () => {
      await service.close();
      if (!opts.fakeServer) await fake.close();
      if (!opts.redis) await redis.stop();
    },
  };
}
