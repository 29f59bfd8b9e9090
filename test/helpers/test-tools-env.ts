/**
 * Imported first by a test that runs the service in its own process with the test-only tools (tools/testing.ts):
 * the tool list is read from the environment when `tools/index.ts` loads, which a later import would be too late for.
 */
process.env['TEST_TOOLS'] = '1';
