import type Anthropic from '@anthropic-ai/sdk';
import type { AnthropicBedrock } from '@anthropic-ai/bedrock-sdk';
import type { AnthropicVertex } from '@anthropic-ai/vertex-sdk';

/**
 * The SDK client the engine drives (ANTHROPIC_PROVIDER, src/providers.ts). Each has `beta.messages.toolRunner` and
 * `beta.messages.thread` (which throws on Bedrock and Vertex: they hold no threads); Bedrock lacks `countTokens`.
 */
export type ModelClient = Anthropic | AnthropicBedrock | AnthropicVertex;
