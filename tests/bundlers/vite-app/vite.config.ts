import { defineConfig } from 'vite';

// RUVLLM_COI=1 serves the page cross-origin isolated (COOP/COEP), so the package can use its threaded build.
const isolated = process.env.RUVLLM_COI === '1';
const headers = isolated ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' } : {};

export default defineConfig({
  server: { headers },
  preview: { headers },
  // Workers as ES modules, so that the engine worker can start the threaded build's workers (the package's README).
  worker: { format: 'es' },
});
