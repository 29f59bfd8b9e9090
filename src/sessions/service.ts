import type { z } from 'zod';
import type { ServerTool } from '../../tools/types.js';
import type { Engine } from '../engine/engine.js';
import type {
  compactBody,
  CreateSessionBody,
  decisionBody,
  forkBody,
  patchSessionBody,
  postMessageBody,
  retryBody,
  toolResultBody,
  toolResultsBody,
} from '../schemas.js';
import type { SessionStore } from '../store/store.js';
import type { ParentRef, SessionState } from '../store/session-state.js';
import type { StoredMessage } from '../history.js';
import type { Toolbox } from '../toolbox.js';
import { cancelRun, patchSession, removeSession, resumeRun, retryTurn } from './control.js';
import { compactSession } from './compact.js';
import { checkCreate, createSession, forkSession } from './create.js';
import { addMessage, listMessages } from './messages.js';
import { replaceMessages } from './replace.js';
import type { MutationResult, SessionDeps } from './mutate.js';
import { continueRun, decide, submitResults } from './tool-calls.js';

export type { MutationResult } from './mutate.js';

/**
 * The operations on sessions behind the REST routes and the WebSocket frames, so both run the same checks.
 * Every mutation is read → check → one guarded `apply` (revision from If-Match, or the one read, or the status),
 * tried again if the session moved in between (mutate.ts). Creating and forking are in create.ts, follow-ups in
 * messages.ts, decisions and tool results in tool-calls.ts, patch/retry/cancel/resume/delete in control.ts.
 */
export class SessionService {
  private readonly deps: SessionDeps;

  constructor(
    store: SessionStore,
    engine: Engine,
    serverTools: ReadonlyMap<string, ServerTool>,
    toolbox: Toolbox,
  ) {
    this.deps = { store, engine, serverTools, toolbox };
  }

  /** `id`: a deterministic id (a schedule's fire), else a new one. */
  create(tenant: string, body: CreateSessionBody, id?: string, parent?: ParentRef): Promise<SessionState> {
    return createSession(this.deps, tenant, body, id, parent);
  }

  /** Checks a create body as `create` does, writing nothing (a schedule's `session`). */
  checkCreate(tenant: string, body: CreateSessionBody): Promise<void> {
    return checkCreate(this.deps, tenant, body);
  }

  fork(tenant: string, id: string, body: z.infer<typeof forkBody>, ifMatch?: number): Promise<SessionState> {
    return forkSession(this.deps, tenant, id, body, ifMatch);
  }

  addMessage(
    tenant: string,
    id: string,
    body: z.infer<typeof postMessageBody>,
    ifMatch?: number,
    by?: string,
  ): Promise<MutationResult> {
    return addMessage(this.deps, tenant, id, body, ifMatch, by);
  }

  messages(tenant: string, id: string, includeCompacted = false) {
    return listMessages(this.deps, tenant, id, includeCompacted);
  }

  compact(
    tenant: string,
    id: string,
    body: z.infer<typeof compactBody>,
    ifMatch?: number,
  ): Promise<MutationResult> {
    return compactSession(this.deps, tenant, id, body, ifMatch);
  }

  decide(
    tenant: string,
    id: string,
    toolUseId: string,
    body: z.infer<typeof decisionBody>,
    ifMatch?: number,
    by?: string,
  ): Promise<MutationResult> {
    return decide(this.deps, tenant, id, toolUseId, body, ifMatch, by);
  }

  putResult(
    tenant: string,
    id: string,
    toolUseId: string,
    body: z.infer<typeof toolResultBody>,
    ifMatch?: number,
  ): Promise<MutationResult> {
    return submitResults(this.deps, tenant, id, [{ tool_use_id: toolUseId, ...body }], false, ifMatch);
  }

  results(
    tenant: string,
    id: string,
    results: z.infer<typeof toolResultsBody>['results'],
    go: boolean,
    ifMatch?: number,
    /** Counters added in the same write (a sub-agent's usage, src/agents/sweep.ts). */
    hincr?: Record<string, number>,
  ): Promise<MutationResult> {
    return submitResults(this.deps, tenant, id, results, go, ifMatch, hincr);
  }

  continue(tenant: string, id: string, ifMatch?: number): Promise<MutationResult> {
    return continueRun(this.deps, tenant, id, ifMatch);
  }

  patch(
    tenant: string,
    id: string,
    body: z.infer<typeof patchSessionBody>,
    ifMatch?: number,
  ): Promise<MutationResult> {
    return patchSession(this.deps, tenant, id, body, ifMatch);
  }

  /** Replaces the whole history of an idle or failed session. */
  replaceMessages(
    tenant: string,
    id: string,
    messages: StoredMessage[],
    ifMatch?: number,
  ): Promise<MutationResult> {
    return replaceMessages(this.deps, tenant, id, messages, ifMatch);
  }

  retry(
    tenant: string,
    id: string,
    body: z.infer<typeof retryBody>,
    ifMatch?: number,
  ): Promise<MutationResult> {
    return retryTurn(this.deps, tenant, id, body, ifMatch);
  }

  cancel(tenant: string, id: string, ifMatch?: number): Promise<MutationResult> {
    return cancelRun(this.deps, tenant, id, ifMatch);
  }

  resume(tenant: string, id: string, ifMatch?: number): Promise<MutationResult> {
    return resumeRun(this.deps, tenant, id, ifMatch);
  }

  remove(tenant: string, id: string, ifMatch?: number): Promise<void> {
    return removeSession(this.deps, tenant, id, ifMatch);
  }
}
