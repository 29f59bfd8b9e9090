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
  { files: ['**/*.cjs'], languageOptions: { sourceType: 'commonjs', globals: globals.node } },
  // The browser console: plain ES modules run by the browser as they are (no build step).
  { files: ['public/**/*.js'], languageOptions: { globals: globals.browser } },
);
