/** The import-cycle check of `npm run lint` (dependency-cruiser), on the TypeScript sources with their `.js` specifiers. */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No import cycles: a module and what it imports must not import it back.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'no-test-code-in-the-service',
      severity: 'error',
      comment:
        'The image holds src, routes and tools only: they never import test code (the fake lives in test/fake).',
      from: { path: '^(src|routes|tools)/' },
      to: { path: '^(test|bench)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
  },
};
