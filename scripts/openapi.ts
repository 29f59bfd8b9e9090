import { writeFile } from 'node:fs/promises';
import {
  CLIENT_TYPES,
  OPENAPI_JSON,
  clientTypesText,
  documentText,
  servedApi,
} from '../test/helpers/openapi.js';

/**
 * `npm run openapi`: writes the OpenAPI document the service serves at /docs/json to openapi.json, and the client's
 * types generated from it to packages/client/src/openapi.ts. Both are committed; test/openapi/openapi.test.ts fails when either is
 * stale. Needs redis-server (the service runs in this process on a private one).
 */
const { document } = await servedApi();
await writeFile(OPENAPI_JSON, await documentText(document));
await writeFile(CLIENT_TYPES, await clientTypesText(document));
console.log(`wrote ${OPENAPI_JSON} and ${CLIENT_TYPES}`);
