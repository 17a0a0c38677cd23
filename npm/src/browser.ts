// Browser entry: the wasm file is fetched from beside the glue module (bundlers follow `new URL(..., import.meta.url)`).
import init from '../wasm/ruvllm.js';
import { setPlatform } from './llm.js';

setPlatform({
  init: async () => {
    await init({ module_or_path: new URL('../wasm/ruvllm_bg.wasm', import.meta.url) });
  },
  // Fetched only for backend "webgpu"/"auto" where navigator.gpu offers an adapter.
  initGpu: async () => {
    const gpu = await import('../wasm-gpu/ruvllm.js');
    await gpu.default({ module_or_path: new URL('../wasm-gpu/ruvllm_bg.wasm', import.meta.url) });
    return gpu;
  },
  open: () => undefined,
});

export * from './index.js';
