import { readdirSync, readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';

/**
 * Lua scripts kept as `.lua` files, registered as ioredis commands (`defineCommand`, so each is sent by EVALSHA and
 * loaded on a NOSCRIPT), as bullmq's `src/commands` does:
 * - a file `<name>-<numkeys>.lua` becomes the command `<prefix><Name>` with `numkeys` keys; a file without the
 *   suffix takes its key count as the first argument of each call (a variadic key list);
 * - a line `--- @include "<path>"` is replaced by that file (relative to the including file, `.lua` added), once per
 *   file even if included twice; shared fragments live in an `includes/` folder beside the scripts.
 * Files are read once, when the commands are defined; `npm run build` copies the folders next to the compiled
 * modules, so `dir` is given relative to the module (`new URL('./lua/', import.meta.url)`).
 */

const INCLUDE = /^--- @include "([\w./-]+)"[ \t]*$/gm;

/** The text of `file` with its includes expanded (`seen` keeps each file to one copy). */
function readLua(file: URL, seen = new Set<string>()): string {
  seen.add(file.href);
  return readFileSync(file, 'utf8').replace(INCLUDE, (_line, rel: string) => {
    const inc = new URL(rel.endsWith('.lua') ? rel : `${rel}.lua`, file);
    return seen.has(inc.href) ? '' : readLua(inc, seen);
  });
}

/** `fanout-begin` → `FanoutBegin`. */
const pascal = (name: string) => name.replace(/(?:^|-)([a-z0-9])/g, (_m, c: string) => c.toUpperCase());

/**
 * Defines a command for every `.lua` file directly in `dir` (not in its subfolders), named `prefix` + the file's
 * name in PascalCase, unless the client has it already (a store built twice on one client). Returns the names.
 */
/** A client of one Redis or of a Redis Cluster: every store takes either. */
export type RedisClient = Redis | Cluster;

export function defineLuaCommands(redis: RedisClient, dir: URL, prefix: string): string[] {
  const names: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.lua')) continue;
    const m = /^([a-z0-9-]+?)(?:-(\d+))?\.lua$/.exec(entry.name);
    if (!m) throw new Error(`Lua file name ${entry.name} is not <name>[-<numkeys>].lua`);
    const name = prefix + pascal(m[1]!);
    // Two versions of one script (a stale build's file beside its successor, `-2.lua` and `-3.lua`): which one the
    // directory listing gives first would be the command, with the wrong number of keys.
    if (names.includes(name))
      throw new Error(`Two Lua files in ${dir.pathname} define ${name}: a stale build?`);
    names.push(name);
    if (typeof Reflect.get(redis, name) === 'function') continue;
    const lua = readLua(new URL(entry.name, dir));
    redis.defineCommand(name, m[2] === undefined ? { lua } : { numberOfKeys: Number(m[2]), lua });
  }
  return names;
}
