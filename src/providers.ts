/**
 * ANTHROPIC_PROVIDER: the SDK client that reaches the model. All three are the SDK's own and share its core
 * (`BaseAnthropic`): the engine drives `client.beta.messages.toolRunner` on each, over their own wires and credentials.
 *
 * - `anthropic`: `Anthropic` (`x-api-key`); message threads.
 * - `bedrock`: `AnthropicBedrock`, SigV4 with the given keys or the AWS default chain, or a Bedrock API key. No
 *   message threads (`_supportsMessageThreads` is false: every turn sends the whole history), no `countTokens`, no
 *   batches; betas go as the body's `anthropic_beta`.
 * - `vertex`: `AnthropicVertex`, Google OAuth (a static token or Application Default Credentials); no message
 *   threads, no batches.
 */
import Anthropic, { type ClientOptions } from '@anthropic-ai/sdk';
import { AnthropicBedrock } from '@anthropic-ai/bedrock-sdk';
import { AnthropicVertex } from '@anthropic-ai/vertex-sdk';
import { GoogleAuth, OAuth2Client, type AuthClient } from 'google-auth-library';
import type { Config } from './config.js';
import type { ModelClient } from './model-client.js';

export type ProviderOptions =
  | {
      provider?: 'anthropic' | undefined;
      apiKey: string;
      baseURL?: string | undefined;
      /** What the SDK calls in place of the network: the offline model (src/offline/fetch.ts). */
      fetch?: typeof fetch | undefined;
      offline: boolean;
    }
  | {
      provider: 'bedrock';
      region: string;
      baseURL?: string | undefined;
      /** A static key pair; neither: the AWS default credential chain (env, profile, SSO, IMDS…). */
      accessKeyId?: string | undefined;
      secretAccessKey?: string | undefined;
      sessionToken?: string | undefined;
      /** A Bedrock API key (Bearer) instead of SigV4. */
      apiKey?: string | undefined;
    }
  | {
      provider: 'vertex';
      region: string;
      projectId: string;
      baseURL?: string | undefined;
      /** A static OAuth token; unset: Application Default Credentials. */
      accessToken?: string | undefined;
    };

/** The provider of a loaded config (checked by `loadConfig`: a cloud provider has its region and project). */
export function providerOptions(config: Config): Exclude<ProviderOptions, { provider: 'anthropic' }> | null {
  if (config.ANTHROPIC_PROVIDER === 'bedrock')
    return {
      provider: 'bedrock',
      region: config.AWS_REGION ?? '',
      baseURL: config.ANTHROPIC_BEDROCK_BASE_URL,
      accessKeyId: config.AWS_ACCESS_KEY_ID,
      secretAccessKey: config.AWS_SECRET_ACCESS_KEY,
      sessionToken: config.AWS_SESSION_TOKEN,
      apiKey: config.AWS_BEARER_TOKEN_BEDROCK,
    };
  if (config.ANTHROPIC_PROVIDER === 'vertex')
    return {
      provider: 'vertex',
      region: config.CLOUD_ML_REGION ?? '',
      projectId: config.ANTHROPIC_VERTEX_PROJECT_ID ?? '',
      baseURL: config.ANTHROPIC_VERTEX_BASE_URL,
      accessToken: config.ANTHROPIC_VERTEX_ACCESS_TOKEN,
    };
  return null;
}

/** The SDK's options every client gets (retries, timeout, tracing, the counting fetch). */
export interface CommonClientOptions {
  maxRetries: number;
  timeout: number;
  fetch: typeof fetch;
  openTelemetry: ClientOptions['openTelemetry'];
}

export class ProviderError extends Error {}

/**
 * The client of `opts`. For Vertex without a static token, Application Default Credentials are looked up now, so
 * a machine without any fails at boot with a clear message rather than at the first turn.
 */
export async function createModelClient(
  opts: ProviderOptions,
  common: CommonClientOptions,
): Promise<ModelClient> {
  if (opts.provider === 'bedrock') {
    const shared = {
      awsRegion: opts.region,
      ...(opts.baseURL ? { baseURL: opts.baseURL } : {}),
      // `null`, not undefined: the SDK would read AWS_BEARER_TOKEN_BEDROCK from the process environment itself.
      apiKey: opts.apiKey ?? null,
      ...common,
    };
    if (opts.accessKeyId === undefined || opts.secretAccessKey === undefined)
      return new AnthropicBedrock(shared);
    return new AnthropicBedrock({
      ...shared,
      awsAccessKey: opts.accessKeyId,
      awsSecretKey: opts.secretAccessKey,
      awsSessionToken: opts.sessionToken ?? null,
    });
  }
  if (opts.provider === 'vertex') {
    return new AnthropicVertex({
      region: opts.region,
      projectId: opts.projectId,
      ...(opts.baseURL ? { baseURL: opts.baseURL } : {}),
      authClient: await vertexAuth(opts.accessToken),
      ...common,
    });
  }
  return new Anthropic({
    apiKey: opts.apiKey,
    ...(opts.baseURL ? { baseURL: opts.baseURL } : {}),
    ...common,
  });
}

async function vertexAuth(accessToken: string | undefined): Promise<AuthClient> {
  if (accessToken !== undefined) {
    // No expiry and no refresh token: the token is sent as given until the service restarts.
    const client = new OAuth2Client();
    client.setCredentials({ access_token: accessToken });
    return client;
  }
  try {
    return await new GoogleAuth({ scopes: 'https://www.googleapis.com/auth/cloud-platform' }).getClient();
  } catch (err) {
    throw new ProviderError(
      'ANTHROPIC_PROVIDER=vertex: no Google credentials (Application Default Credentials: ' +
        `GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, or a metadata server) and no ANTHROPIC_VERTEX_ACCESS_TOKEN: ${
          err instanceof Error ? err.message : String(err)
        }`,
    );
  }
}
