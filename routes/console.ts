import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { notFound } from '../src/errors.js';
import { errors } from '../src/openapi/responses.js';

/**
 * GET /console: the browser console (spec §6.5), a single page of static files in `public/console/` plus Preact,
 * its hooks and htm served from `node_modules` (no CDN), and the typed client's browser build. The page speaks only the public API, with a
 * key the person pastes. `/demo` (the former demo page) redirects here.
 */

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

function asset(path: string): Asset {
  return assetOf(readFileSync(path), /\.[a-z]+$/.exec(path)?.[0] ?? '');
}

function assetOf(body: Buffer, ext: string): Asset {
  const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
  return { body, type: TYPES[ext] ?? 'application/octet-stream', etag };
}

/** `public/console`, found from this file both as source (`routes/`) and compiled (`dist/routes/`). */
function consoleDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    const candidate = join(dir, 'public', 'console');
    if (existsSync(join(candidate, 'index.html'))) return candidate;
    dir = dirname(dir);
  }
  throw new Error('public/console/index.html not found next to the service');
}

/** The page's own files: served by name, nothing else of the directory. */
const OWN_FILES = [
  'app.js',
  'api.js',
  'children.js',
  'session.js',
  'tree.js',
  'ui.js',
  'view.js',
  'style.css',
  'favicon.svg',
];

/** The ES module builds of Preact, its hooks and htm (the `import` condition of each package's exports). */
function vendorFiles(): Record<string, string> {
  const path = (specifier: string) => fileURLToPath(import.meta.resolve(specifier));
  return { 'preact.mjs': path('preact'), 'hooks.mjs': path('preact/hooks'), 'htm.mjs': path('htm') };
}

/**
 * The typed client's browser build (packages/client), served as /console/vendor/client.js: the console's API layer
 * (public/console/api.js) is the client. Compiled (`dist/routes/console.js`), the service serves
 * `dist/client/browser.js`, which `npm run build:client` writes (`npm start` and the image's build stage run it).
 * From source (tsx: the tests, `npm run dev`) it bundles the client's source in memory with esbuild (a dev
 * dependency), once, on the first request, so the console never runs a stale build. Without either, 404.
 */
function clientBuild(dir: string): () => Promise<Asset | undefined> {
  const root = join(dir, '..', '..');
  const built = join(root, 'dist', 'client', 'browser.js');
  const fromSource = import.meta.url.endsWith('.ts') || !existsSync(built);
  let bundle: Promise<Asset | undefined> | undefined;
  return () => {
    bundle ??= fromSource
      ? bundleClient(join(root, 'packages', 'client', 'src', 'index.ts'))
      : Promise.resolve(asset(built));
    return bundle;
  };
}

/** esbuild with the options of `npm run build:client` (bar the source map file), to memory. */
async function bundleClient(entry: string): Promise<Asset | undefined> {
  if (!existsSync(entry)) return undefined;
  const esbuild = await import('esbuild').catch(() => undefined);
  if (!esbuild) return undefined;
  const out = await esbuild.build({
    entryPoints: [entry],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    sourcemap: 'inline',
    write: false,
    logLevel: 'silent',
  });
  return assetOf(Buffer.from(out.outputFiles[0]!.contents), '.js');
}

/**
 * The console's Content-Security-Policy: its own scripts, styles and images only, plus the one inline script the
 * page has (its import map, allowed by hash); fetch and WebSocket to this origin only (`'self'` covers ws/wss).
 */
export function consoleCsp(importMapHash: string): string {
  return [
    "default-src 'none'",
    `script-src 'self' 'sha256-${importMapHash}'`,
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

const fileParams = z.object({ file: z.string().max(64) });

const routes: FastifyPluginAsync = async (plain) => {
  const app = plain.withTypeProvider<ZodTypeProvider>();
  const dir = consoleDir();
  const page = asset(join(dir, 'index.html'));
  const importMap = /<script type="importmap">([\s\S]*?)<\/script>/.exec(page.body.toString('utf8'))?.[1];
  if (importMap === undefined) throw new Error('public/console/index.html has no import map');
  const csp = consoleCsp(createHash('sha256').update(importMap).digest('base64'));
  const own = new Map(OWN_FILES.map((f) => [f, asset(join(dir, f))]));
  const vendor = new Map(Object.entries(vendorFiles()).map(([name, path]) => [name, asset(path)]));
  const client = clientBuild(dir);
  const send = (req: FastifyRequest, reply: FastifyReply, a: Asset) => {
    // Revalidated on every load (`no-cache`), so a new version of the service never runs with stale scripts.
    reply
      .header('cache-control', 'no-cache')
      .header('etag', a.etag)
      .header('x-content-type-options', 'nosniff');
    if (req.headers['if-none-match'] === a.etag) return reply.code(304).send();
    return reply.type(a.type).send(a.body);
  };
  // Documented in the OpenAPI document like every route (no key needed); 304 when If-None-Match matches.
  const file = (summary: string, operationId: string, types: string[]) => ({
    summary,
    operationId,
    tags: ['console'],
    security: [],
    response: {
      200: {
        description: 'OK',
        content: Object.fromEntries(types.map((t) => [t, { schema: z.string() }])),
      },
      304: z.null().meta({ description: 'Not Modified' }),
    },
  });
  const notFoundFile = errors(400, 404);

  app.get(
    '/console',
    { schema: file('The browser console', 'getConsole', ['text/html']) },
    async (req, reply) =>
      send(req, reply.header('content-security-policy', csp).header('referrer-policy', 'no-referrer'), page),
  );
  const ownFile = file("A file of the console's page", 'getConsoleFile', [
    'text/javascript',
    'text/css',
    'image/svg+xml',
  ]);
  app.get(
    '/console/:file',
    { schema: { ...ownFile, params: fileParams, response: { ...ownFile.response, ...notFoundFile } } },
    async (req, reply) => {
      const a = own.get(req.params.file);
      if (!a) throw notFound('file');
      return send(req, reply, a);
    },
  );
  const vendorFile = file(
    'A library module of the console (Preact, its hooks, htm, the typed client)',
    'getConsoleVendorFile',
    ['text/javascript'],
  );
  app.get(
    '/console/vendor/:file',
    { schema: { ...vendorFile, params: fileParams, response: { ...vendorFile.response, ...notFoundFile } } },
    async (req, reply) => {
      const a = req.params.file === 'client.js' ? await client() : vendor.get(req.params.file);
      if (!a) throw notFound('file');
      return send(req, reply, a);
    },
  );
  app.get(
    '/favicon.ico',
    { schema: file('The favicon', 'getFavicon', ['image/svg+xml']) },
    async (req, reply) => send(req, reply, own.get('favicon.svg')!),
  );
  app.get(
    '/demo',
    {
      schema: {
        summary: 'The former demo page: redirects to /console',
        operationId: 'getDemo',
        tags: ['console'],
        security: [],
        response: { 302: z.null().meta({ description: 'Found: redirects to /console' }) },
      },
    },
    async (_req, reply) => reply.redirect('/console', 302),
  );
};

export default routes;
