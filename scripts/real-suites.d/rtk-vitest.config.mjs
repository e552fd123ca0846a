// @reduxjs/toolkit's own vitest config is not in its npm tarball; this restores what its
// non-React tests need from it: vitest globals and the `@reduxjs/toolkit` and `@internal`
// aliases to the shipped sources. createAsyncThunk.test.ts is left out: it fails outside too
// without the repo's setup file.
const src = (p) => new URL(p, import.meta.url).pathname
export default {
  test: {
    globals: true,
    include: ['src/tests/*.test.ts', 'src/entities/tests/*.test.ts'],
    exclude: ['src/tests/createAsyncThunk.test.ts'],
    alias: {
      '@reduxjs/toolkit': src('./src/index.ts'),
      '@internal': src('./src'),
    },
    server: { deps: { inline: ['redux', '@reduxjs/toolkit'] } },
  },
}
