import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { NotFound, InvalidRequest } from '../src/errors.js';
import { canonicalPath, MemoryPathError } from '../src/memory/paths.js';
import {
  deletedMemoryFile,
  errors,
  memoryFile,
  memoryFileList,
  routeErrors,
  type RouteCodes,
} from '../src/openapi/responses.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['file_not_found'] } as const satisfies RouteCodes;

const tags = ['memory'];
const pathParam = z.object({
  '*': z
    .string()
    .meta({ description: 'The file, relative to /memories; may hold slashes (`notes/today.md`).' }),
});

/** The file a request names, canonical (400 `invalid_memory_path` for anything that could leave the tenant's files). */
function filePath(raw: string): string {
  try {
    const rel = canonicalPath(raw);
    if (rel === '') throw new MemoryPathError('name a file');
    return rel;
  } catch (err) {
    if (err instanceof MemoryPathError)
      throw new InvalidRequest('invalid_memory_path', `Not a memory file path: ${err.message}.`, undefined, {
        cause: err,
      });
    throw err;
  }
}

const notFound = (rel: string) => new NotFound('file', `There is no memory file ${rel}.`, { path: rel });

/**
 * The memory tool's files of the caller's tenant (the files every session of the tenant with `"memory"` shares):
 * list, read one, delete one. Another tenant's files are never reached: the tenant picks the keys.
 */
const routes: FastifyPluginAsyncZod = async (app) => {
  const memory = app.memory;

  app.get(
    '/v1/memory',
    {
      schema: {
        operationId: 'listMemoryFiles',
        summary: "The memory tool's files of the caller's tenant",
        tags,
        response: { 200: memoryFileList, ...errors(401, 429, 500, 503) },
      },
    },
    async (req) => {
      const [files, total] = await Promise.all([memory.list(req.tenant, ''), memory.usedBytes(req.tenant)]);
      const { maxFileBytes, maxTenantBytes, maxFiles } = memory.limits;
      return {
        data: files.map((f) => ({ path: f.path, size_bytes: f.bytes })),
        total_bytes: total,
        limits: { max_file_bytes: maxFileBytes, max_tenant_bytes: maxTenantBytes, max_files: maxFiles },
      };
    },
  );

  app.get(
    '/v1/memory/*',
    {
      schema: {
        operationId: 'getMemoryFile',
        summary: 'One memory file',
        tags,
        params: pathParam,
        response: { 200: memoryFile, ...routeErrors(NOT_FOUND, 400, 401, 404, 429, 500, 503) },
      },
    },
    async (req) => {
      const rel = filePath(req.params['*']);
      const content = await memory.read(req.tenant, rel);
      if (content === null) throw notFound(rel);
      return { path: rel, content, size_bytes: Buffer.byteLength(content, 'utf8') };
    },
  );

  app.delete(
    '/v1/memory/*',
    {
      schema: {
        operationId: 'deleteMemoryFile',
        summary: 'Delete one memory file',
        tags,
        params: pathParam,
        response: {
          200: deletedMemoryFile,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 413, 415, 429, 500, 503),
        },
      },
    },
    async (req) => {
      const rel = filePath(req.params['*']);
      // Only a file: a directory (files under `rel/`) is not deleted by this route.
      if ((await memory.remove(req.tenant, rel, { fileOnly: true })) === 0) throw notFound(rel);
      return { path: rel, deleted: true as const };
    },
  );
};

export default routes;
