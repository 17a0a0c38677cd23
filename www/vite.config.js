// The chat demo's build and servers. Both servers (`vite`, `vite preview`):
// - send COOP/COEP, so the page is cross-origin isolated and the package runs its threaded build;
// - serve the models of the local model cache (~/.cache/ruvllm, or the directory of $RUVLLM_MODEL) under /models/,
//   so the default model loads with no download from the internet (scripts/fetch-model.sh puts it there).
import { createReadStream, existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { defineConfig } from 'vite';

const ISOLATION = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' };
const MODEL_DIR = process.env.RUVLLM_MODEL
  ? dirname(process.env.RUVLLM_MODEL)
  : (process.env.RUVLLM_CACHE ?? join(homedir(), '.cache', 'ruvllm'));

/** GET /models/ lists the .gguf files of MODEL_DIR as JSON; GET /models/NAME.gguf sends one, with its length. */
function localModels(req, res, next) {
  const url = new URL(req.url ?? '/', 'http://x');
  if (!url.pathname.startsWith('/models/')) return next();
  const name = decodeURIComponent(url.pathname.slice('/models/'.length));
  if (name === '' || name === 'index.json') {
    const files = existsSync(MODEL_DIR) ? readdirSync(MODEL_DIR).filter((f) => f.endsWith('.gguf')) : [];
    const list = files.map((f) => ({ name: f, bytes: statSync(join(MODEL_DIR, f)).size }));
    res.setHeader('Content-Type', 'application/json');
    res.setHeader('Cache-Control', 'no-store');
    res.end(JSON.stringify(list));
    return;
  }
  const file = join(MODEL_DIR, basename(name));
  if (!name.endsWith('.gguf') || basename(name) !== name || !existsSync(file)) {
    res.statusCode = 404;
    res.end('no such model in ' + MODEL_DIR);
    return;
  }
  // A length (no compression), so the page can show progress as a share of the whole and a time left.
  res.setHeader('Content-Type', 'application/octet-stream');
  res.setHeader('Content-Length', String(statSync(file).size));
  res.setHeader('Cache-Control', 'no-store');
  if (req.method === 'HEAD') return res.end();
  createReadStream(file).pipe(res);
}

const modelsPlugin = {
  name: 'ruvllm-local-models',
  configureServer: (server) => void server.middlewares.use(localModels),
  configurePreviewServer: (server) => void server.middlewares.use(localModels),
};

// The package is a link to ../npm: the dev server may serve its files (its .wasm builds) from there.
const PACKAGE_DIR = realpathSync(new URL('./node_modules/@ruvector/ruvllm', import.meta.url));

export default defineConfig({
  plugins: [modelsPlugin],
  server: { headers: ISOLATION, fs: { allow: ['.', PACKAGE_DIR] } },
  preview: { headers: ISOLATION },
  build: { target: 'es2022', chunkSizeWarningLimit: 2000 },
  worker: { format: 'es' },
});
