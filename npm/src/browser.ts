// Browser entry: the wasm files are fetched from beside the glue modules (bundlers follow `new URL(..., import.meta.url)`).
// The threaded build needs SharedArrayBuffer, which browsers give only to cross-origin isolated pages.
import { setPlatform } from './platform.js';

setPlatform({
  wasmSource: async (url) => url,
  whyNoThreads: () =>
    globalThis.crossOriginIsolated === true
      ? null
      : 'the page is not cross-origin isolated, so it has no SharedArrayBuffer for threads (serve it with the headers ' +
        'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp)',
  defaultThreads: () => Math.min(globalThis.navigator?.hardwareConcurrency ?? 1, 8),
  startThreaded: (start) => start(),
  keepAlive: (promise) => promise,
  open: () => undefined,
  openPrefix: () => undefined,
  fileStore: () => undefined,
  modelStore: () => undefined,
});

export * from './index.js';
