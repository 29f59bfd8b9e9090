/** Where the test-only server tools are (test/tools/testing.ts): a service loads them through SERVER_TOOLS_MODULE. */
import { fileURLToPath } from 'node:url';

export const TEST_TOOLS_MODULE = fileURLToPath(new URL('../tools/testing.ts', import.meta.url));
