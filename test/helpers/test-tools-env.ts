/**
 * Imported first by a test that builds the service in its own process with the test-only tools: the tool list is
 * read when `tools/index.ts` loads (SERVER_TOOLS_MODULE), which a later import would be too late for.
 */
import { TEST_TOOLS_MODULE } from './test-tools.js';

process.env['SERVER_TOOLS_MODULE'] = TEST_TOOLS_MODULE;
