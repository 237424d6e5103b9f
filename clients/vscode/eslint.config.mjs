import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
    { ignores: ['dist', 'out', 'node_modules'] },
    js.configs.recommended,
    ...tseslint.configs.recommended,
    {
        files: ['src/**/*.ts'],
        rules: {
            eqeqeq: 'error',
            curly: ['error', 'multi-line'],
            '@typescript-eslint/no-floating-promises': 'error',
        },
        languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    },
    // node:test's test() returns a promise the runner itself awaits.
    { files: ['src/test/**/*.ts'], rules: { '@typescript-eslint/no-floating-promises': 'off' } },
);
