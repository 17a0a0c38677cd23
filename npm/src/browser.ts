// Browser entry: the wasm files are fetched from beside the glue modules (bundlers follow `new URL(..., import.meta.url)`).
// The threaded build needs SharedArrayBuffer, which browsers give only to cross-origin isolated pages.
import { setPlatform } from './llm.js';

setPlatform({
  wasmSource: async (url) => url,
  canThread: () => globalThis.crossOriginIsolated === true,
  defaultThreads: () => Math.min(globalThis.navigator?.hardwareConcurrency ?? 1, 8),
  startThreaded: (start) => start(),
  keepAlive: (promise) => promise,
  open: () => undefined,
});

export * from './index.js';
