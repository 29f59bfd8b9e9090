import type { FakeRequest } from '../../src/offline/wire.js';
import { apiError, text, toolCall } from '../fake/script.js';

const systemOf = (req: FakeRequest) =>
  typeof req.body.system === 'string' ? req.body.system : (req.body.system ?? []).map((b) => b.text).join('');

/** The writer asks its researcher, then writes from the findings; the researcher answers (or waits for a client tool: `waits`; or its upstream refuses it: `broken`). */
export function writerResearcher(req: FakeRequest) {
  const sys = systemOf(req);
  const last = req.body.messages.at(-1);
  const blocks = Array.isArray(last?.content) ? last.content : [];
  const result = blocks.find((b) => b.type === 'tool_result');
  if (sys.includes('researcher')) {
    if (sys.includes('waits') && !result) return toolCall('lookup', {});
    if (sys.includes('broken'))
      return apiError(400, 'invalid_request_error', { message: 'broken researcher' });
    return text('Findings: Rayleigh scattering makes the sky blue.');
  }
  if (!result) return toolCall('researcher', { prompt: 'Why is the sky blue?' });
  const content = result.type === 'tool_result' ? result.content : '';
  const found =
    typeof content === 'string' ? content : (content ?? []).map((c) => ('text' in c ? c.text : '')).join('');
  return text(
    `Article, from the research (error: ${String(result.type === 'tool_result' && result.is_error === true)}): ${found}`,
  );
}

/** A writer session with a `researcher` sub-agent (the create body; `writerResearcher` is its model). */
export const writerWithResearcher = {
  system: 'You are a writer.',
  input: 'Write about the sky.',
  tools: [
    {
      type: 'agent',
      name: 'researcher',
      description: 'Researches a question.',
      session: { system: 'You are a researcher.' },
    },
  ],
};
