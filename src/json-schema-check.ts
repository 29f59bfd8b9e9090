/**
 * The checks of a client tool's `input_schema` (and a tenant tool's) before it is accepted: its size, its references
 * (local only, each pointing at something) and the JSON Schema meta-schema. Nothing is compiled here
 * (src/engine/client-validation.ts compiles the schemas of `validate: true` tools).
 */
import { Ajv } from 'ajv';

/**
 * Client tools' JSON Schemas are checked against the JSON Schema meta-schema, never compiled: compiling would keep
 * every schema (accepted or not) in the instance's registry for the life of the process, cost time superlinear in
 * the schema, and make a `$id` one tenant used clash for every later request. Validating against the meta-schema
 * keeps nothing, is linear in the schema's size (bounded below), and `$id` means nothing to it. The model provider
 * checks the schema again when it is used.
 */
const metaSchemaChecker = new Ajv({ strict: false, validateSchema: true });

/** Largest `input_schema` of a client tool, as JSON (UTF-16 code units, as the JSON text). */
export const TOOL_SCHEMA_MAX_BYTES = 65_536;

/** Every `$ref` of a schema must point inside it (`#…`): nothing is fetched or looked up elsewhere. */
function firstExternalRef(value: unknown, path: string): string | null {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = firstExternalRef(value[i], `${path}/${i}`);
      if (found) return found;
    }
    return null;
  }
  if (typeof value !== 'object' || value === null) return null;
  for (const [k, v] of Object.entries(value)) {
    if (k === '$ref' && typeof v === 'string' && !v.startsWith('#')) return `${path}/$ref`;
    const found = firstExternalRef(v, `${path}/${k}`);
    if (found) return found;
  }
  return null;
}

/** The value at a JSON Pointer fragment (`#/a/b~1c`) of `root`, or undefined when nothing is there. */
function atPointer(root: unknown, fragment: string): unknown {
  if (fragment === '#') return root;
  if (!fragment.startsWith('#/')) return undefined;
  let at: unknown = root;
  for (const raw of fragment.slice(2).split('/')) {
    let part: string;
    try {
      part = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    } catch {
      return undefined;
    }
    if (typeof at !== 'object' || at === null || !Object.hasOwn(at, part)) return undefined;
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

/**
 * The first local `$ref` that points at nothing (a pointer to no value, an anchor no `$anchor` names), as a path,
 * or null. A schema with a nested `$id` is not looked at: its references resolve against that resource, which this
 * walk does not follow. Linear in the schema (bounded by TOOL_SCHEMA_MAX_BYTES).
 */
function firstDanglingRef(schema: object): string | null {
  const refs: Array<[string, string]> = [];
  const anchors = new Set<string>();
  let nestedId = false;
  const walk = (value: unknown, path: string): void => {
    if (Array.isArray(value)) return value.forEach((v, i) => walk(v, `${path}/${i}`));
    if (typeof value !== 'object' || value === null) return;
    for (const [k, v] of Object.entries(value)) {
      if (k === '$ref' && typeof v === 'string') refs.push([v, `${path}/$ref`]);
      else if ((k === '$anchor' || k === '$dynamicAnchor') && typeof v === 'string') anchors.add(v);
      else if (k === '$id' && path !== '') nestedId = true;
      walk(v, `${path}/${k}`);
    }
  };
  walk(schema, '');
  if (nestedId) return null;
  for (const [ref, path] of refs) {
    const found =
      ref === '#' || ref.startsWith('#/') ? atPointer(schema, ref) !== undefined : anchors.has(ref.slice(1));
    if (!found) return path;
  }
  return null;
}

export function jsonSchemaProblem(schema: object): string | null {
  const size = JSON.stringify(schema).length;
  if (size > TOOL_SCHEMA_MAX_BYTES)
    return `the schema is ${size} bytes as JSON; at most ${TOOL_SCHEMA_MAX_BYTES} are accepted`;
  const ref = firstExternalRef(schema, '');
  if (ref) return `only local references ("#…") are allowed (at ${ref})`;
  const dangling = firstDanglingRef(schema);
  if (dangling) return `a reference points at nothing in the schema (at ${dangling})`;
  try {
    if (metaSchemaChecker.validateSchema(schema) === true) return null;
    return metaSchemaChecker.errorsText(metaSchemaChecker.errors, { dataVar: 'schema' });
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}
