import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { defineLuaCommands } from './lua-commands.js';
import { memoryKeys } from './keys.js';
import { MAX_DEPTH, MAX_PATH } from '../memory/paths.js';

/** Caps of the memory tool's files, per tenant (MEMORY_MAX_* in the config). */
export interface MemoryLimits {
  maxFileBytes: number;
  maxTenantBytes: number;
  maxFiles: number;
}

/** A path named both a file and a directory is refused: `not_a_directory` (a file is on its way), `is_directory`. */
export type WriteOutcome =
  | 'ok'
  | 'conflict'
  | 'exists'
  | 'file_too_big'
  | 'tenant_full'
  | 'too_many_files'
  | 'not_a_directory'
  | 'is_directory';
/** `too_long`: a file moved with a directory would get a path past MAX_PATH characters or MAX_DEPTH levels. */
export type RenameOutcome = 'ok' | 'not_found' | 'exists' | 'into_itself' | 'not_a_directory' | 'too_long';

/** SHA-1 (hex) of a file's content as Redis computes it (`redis.sha1hex`): the version a conditional write expects. */
export const contentVersion = (content: string): string =>
  createHash('sha1').update(content, 'utf8').digest('hex');

/**
 * The memory tool's files in Redis: one hash per tenant (path relative to `/memories` → content) and its byte total,
 * both under the tenant's hash tag. Writes are scripts (src/store/lua/memory-*.lua) that keep the total and the caps
 * atomically; a read-modify-write (str_replace, insert) is a write conditioned on the version it read.
 */
export class MemoryStore {
  constructor(
    private readonly redis: Redis | Cluster,
    readonly limits: MemoryLimits,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'sess');
  }

  /** A file's content, or null. */
  read(tenant: string, path: string): Promise<string | null> {
    return this.redis.hget(memoryKeys(tenant).files, path);
  }

  /** Files under `dir` (`''`: all) with their sizes in bytes, sorted by path. */
  async list(tenant: string, dir: string): Promise<Array<{ path: string; bytes: number }>> {
    const flat = await this.redis.sessMemoryList(memoryKeys(tenant).files, dir === '' ? '' : `${dir}/`);
    const out: Array<{ path: string; bytes: number }> = [];
    for (let i = 0; i + 1 < flat.length; i += 2)
      out.push({ path: String(flat[i]), bytes: Number(flat[i + 1]) });
    return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  }

  /** The tenant's bytes in use. */
  async usedBytes(tenant: string): Promise<number> {
    return Number((await this.redis.get(memoryKeys(tenant).bytes)) ?? 0);
  }

  /**
   * Writes a file within the caps. `expected`: `''` any (create or overwrite), `'!'` only if absent, else the
   * `contentVersion` of the content it must still have.
   */
  write(tenant: string, path: string, content: string, expected = ''): Promise<WriteOutcome> {
    const k = memoryKeys(tenant);
    const { maxFileBytes, maxTenantBytes, maxFiles } = this.limits;
    return this.redis.sessMemoryWrite(
      k.files,
      k.bytes,
      path,
      content,
      expected,
      maxFileBytes,
      maxTenantBytes,
      maxFiles,
    );
  }

  /** Deletes a file, or (unless `fileOnly`) every file under a directory; returns how many. */
  remove(tenant: string, path: string, opts: { fileOnly?: boolean } = {}): Promise<number> {
    const k = memoryKeys(tenant);
    return this.redis.sessMemoryRemove(k.files, k.bytes, path, opts.fileOnly ? '1' : '0');
  }

  rename(tenant: string, from: string, to: string): Promise<RenameOutcome> {
    const k = memoryKeys(tenant);
    return this.redis.sessMemoryRename(k.files, k.bytes, from, to, MAX_PATH, MAX_DEPTH);
  }
}
