import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['node_modules/**', '.data/**', 'coverage/**', 'dist/**', 'packages/client/dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  // The service's code: no `any` (use the SDK's types, or `unknown` narrowed where the data comes from outside).
  { files: ['src/**/*.ts', 'routes/**/*.ts'], rules: { '@typescript-eslint/no-explicit-any': 'error' } },
  // The run queue (src/store/runs.ts) is the only door to `runs:due`, the run leases and the tenants' run slots: the
  // rest of the service says what happens to a run (start, claim, heartbeat, end, …), never which key to write.
  {
    files: ['src/**/*.ts', 'routes/**/*.ts'],
    ignores: ['src/store/runs.ts', 'src/store/keys.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: 'ImportSpecifier[imported.name=/^(RUNS_KEY|tenantRunsKey)$/]',
          message: 'The run queue owns this key: use an operation of src/store/runs.ts.',
        },
        {
          selector: 'Literal[value=/^runs:due$|:runs$/]',
          message: 'The run queue owns this key: use an operation of src/store/runs.ts.',
        },
        {
          selector:
            'MemberExpression[property.name=/^sess(Acquire|Renew|Release|RunSlotTake|RunSlotPrune)$/]',
          message: "Lease and run-slot scripts are the run queue's: use an operation of src/store/runs.ts.",
        },
        {
          selector: "MemberExpression[object.property.name='runs'][property.name='renew']",
          message: 'A run renews its lease by `heartbeat` (renew is open only for a test).',
        },
      ],
    },
  },
  { files: ['**/*.cjs'], languageOptions: { sourceType: 'commonjs', globals: globals.node } },
  // The browser console: plain ES modules run by the browser as they are (no build step).
  { files: ['public/**/*.js'], languageOptions: { globals: globals.browser } },
);
