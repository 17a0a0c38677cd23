// The packed package inside apps built by bundlers, as a user builds them: a Vite 8 + TypeScript app (built
// and served by `vite preview`, and under the dev server) and a webpack 5 app, each with and without
// cross-origin isolation, in headless Chromium. Every app is tests/bundlers/<app>/ plus tests/bundlers/main.ts
// (the page: load /model.gguf, stream the France answer over the chat API), assembled under target/bundlers/
// with the package's tarball installed by npm.
// Run: node --test tests/browser/   (after `npm ci && npm run build` in npm/ and scripts/build-wasm.sh)
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { MODEL_PATH, PACKAGE_DIR, REPO_DIR, freePort } from '../../npm/test/helpers.mjs';
import { serve } from '../../npm/test/server.mjs';
import { ISOLATED, launchChromium } from './chromium.mjs';

const APPS = join(REPO_DIR, 'tests', 'bundlers');
const WORK = join(REPO_DIR, 'target', 'bundlers');
/** What the model answers "Name the capital of France." with, through its chat template, at temperature 0 (as llama.cpp,
 * with a wide margin; "What is the capital of France?" after the template's system turn is a near tie). */
const ANSWER = 'The capital of France is Paris.';
const MODEL_BYTES = statSync(MODEL_PATH).size;

let browser;
const stops = [];

/** Copy tests/bundlers/<name> (without node_modules) and the shared page into target/bundlers/<name>, and
 * install its pinned tools and the packed package there. */
function assemble(name, tarball) {
  const dir = join(WORK, name);
  rmSync(join(dir, 'src'), { recursive: true, force: true });
  rmSync(join(dir, 'dist'), { recursive: true, force: true });
  cpSync(join(APPS, name), dir, { recursive: true, filter: (src) => !src.includes('node_modules') });
  mkdirSync(join(dir, 'src'), { recursive: true });
  copyFileSync(join(APPS, 'main.ts'), join(dir, 'src', 'main.ts'));
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--no-save', tarball], { cwd: dir, stdio: 'inherit' });
  return dir;
}

before(async () => {
  mkdirSync(WORK, { recursive: true });
  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', WORK], { cwd: PACKAGE_DIR, encoding: 'utf8' }));
  const tarball = join(WORK, packed.filename);
  const vite = assemble('vite-app', tarball);
  // Vite serves public/ as is (dev) and copies it into dist/ (build): the model comes from there.
  mkdirSync(join(vite, 'public'), { recursive: true });
  rmSync(join(vite, 'public', 'model.gguf'), { force: true });
  symlinkSync(MODEL_PATH, join(vite, 'public', 'model.gguf'));
  execFileSync('npm', ['run', 'build'], { cwd: vite, stdio: 'inherit' });
  const webpack = assemble('webpack-app', tarball);
  execFileSync('npm', ['run', 'build'], { cwd: webpack, stdio: 'inherit' });
  copyFileSync(join(webpack, 'index.html'), join(webpack, 'dist', 'index.html'));
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  for (const stop of stops) await stop();
});

/** Start `vite` (the dev server) or `vite preview` in the Vite app; resolves to its origin once it listens. */
async function startVite(command, isolated) {
  const port = await freePort();
  const args = [join('node_modules', 'vite', 'bin', 'vite.js'), ...(command === 'dev' ? [] : [command]), '--host', '127.0.0.1', '--port', String(port), '--strictPort'];
  // NO_COLOR: with CI set, Vite colours its output, and the port in the URL it prints comes wrapped in escapes.
  const env = { ...process.env, RUVLLM_COI: isolated ? '1' : '0', NO_COLOR: '1' };
  const child = spawn(process.execPath, args, { cwd: join(WORK, 'vite-app'), env, stdio: ['ignore', 'pipe', 'inherit'] });
  stops.push(async () => {
    if (child.exitCode === null) {
      child.kill();
      await new Promise((resolve) => child.once('exit', resolve));
    }
  });
  const origin = `http://127.0.0.1:${port}`;
  await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`vite ${command} did not print ${origin} within 60 s: ${out}`)), 60_000);
    child.stdout.on('data', (d) => {
      out += d;
      if (out.replace(/\x1b\[[0-9;]*m/g, '').includes(origin)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`vite ${command} exited with ${code}: ${out}`));
    });
  });
  return origin;
}

/** Open `url` and wait for the page's outcome (tests/bundlers/main.ts); with `keepOpen`, the outcome and the page,
 * left open. */
async function outcome(url, { keepOpen = false } = {}) {
  const page = await browser.context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  try {
    await page.goto(url);
    // A load that hangs fails here, not at the runner's limit for the whole file.
    const result = await page.evaluate(() =>
      Promise.race([window.outcome, new Promise((_, reject) => setTimeout(() => reject(new Error('no outcome within 180 s')), 180_000))]),
    );
    assert.deepEqual(errors, [], 'uncaught errors in the page');
    return keepOpen ? { result, page } : result;
  } finally {
    if (!keepOpen) await page.close();
  }
}

/** The page answered, on `threads` threads (or on one, with the reason matching `why`). */
function assertAnswered(r, { threads, why }) {
  assert.equal(r.error, undefined, `the page failed: ${JSON.stringify(r.error)}`);
  assert.equal(r.answer, ANSWER);
  assert.equal(r.info.threads, threads, JSON.stringify(r.info.threadFallback));
  assert.equal(r.info.build, threads > 1 ? 'wasm-mt' : 'wasm');
  if (why) {
    assert.equal(r.info.threadFallback?.code, 'E_THREADS');
    assert.match(r.info.threadFallback.message, why);
  } else {
    assert.equal(r.info.threadFallback, null);
  }
  // Progress counts the bytes read, whether or not the server gave a length (vite preview gzips without one).
  assert.ok(r.progress.calls > 0);
  assert.equal(r.progress.loaded, MODEL_BYTES);
  assert.ok(r.progress.total === undefined || r.progress.total === MODEL_BYTES);
}

test('Vite build + preview, cross-origin isolated: the threaded build answers in the engine worker', async () => {
  const r = await outcome(await startVite('preview', true));
  assertAnswered(r, { threads: 2 });
  assert.equal(r.info.engine, 'worker');
});

test('Vite build + preview, not isolated: one thread answers and info() says why', async () => {
  assertAnswered(await outcome(await startVite('preview', false)), { threads: 1, why: /not cross-origin isolated/ });
});

test('Vite build + preview, worker: false: the engine in the page answers', async () => {
  const r = await outcome(`${await startVite('preview', false)}/?engine=page`);
  assertAnswered(r, { threads: 1, why: /not cross-origin isolated/ });
  assert.equal(r.info.engine, 'page');
});

test('Vite build, shared: true: two pages of one origin answer with one engine, the model requested once', async () => {
  const dist = join(WORK, 'vite-app', 'dist');
  const server = await serve({ root: dist, files: { '/': join(dist, 'index.html'), '/model.gguf': MODEL_PATH } });
  stops.push(server.close);
  // The first page keeps its model; the second loads while it holds it, and both answer.
  const first = await outcome(`${server.origin}/?engine=shared&keep=1`, { keepOpen: true });
  const requests = server.hits.get('/model.gguf');
  const second = await outcome(`${server.origin}/?engine=shared`);
  assertAnswered(first.result, { threads: 1, why: /not cross-origin isolated/ });
  assertAnswered(second, { threads: 1, why: /not cross-origin isolated/ });
  assert.equal(second.info.engine, 'shared');
  assert.equal(second.info.pages, 2);
  assert.equal(second.info.wasmMemoryBytes, first.result.info.wasmMemoryBytes, 'the second page grew the engine');
  assert.equal(server.hits.get('/model.gguf'), requests, 'the second page requested the model');
  await first.page.close();
});

test('Vite dev server, cross-origin isolated: the threaded build answers', async () => {
  assertAnswered(await outcome(await startVite('dev', true)), { threads: 2 });
});

test('Vite dev server, not isolated: one thread answers', async () => {
  assertAnswered(await outcome(await startVite('dev', false)), { threads: 1, why: /not cross-origin isolated/ });
});

test('workers whose scripts cannot load: the engine in the page on one thread, with the reasons, not a hang', async () => {
  // The Vite build served cross-origin isolated, refusing the requests of module workers for their scripts. Without
  // validators and not to be cached: with them (the file server sends ETag and Last-Modified), after an earlier test
  // had run the same build, the workers started without their requests reaching this server.
  const server = await serve({
    root: join(WORK, 'vite-app', 'dist'),
    files: { '/': join(WORK, 'vite-app', 'dist', 'index.html'), '/model.gguf': MODEL_PATH },
    headers: { ...ISOLATED, 'cache-control': 'no-store' },
    validators: false,
    refuse: (req) => req.headers['sec-fetch-dest'] === 'worker',
  });
  stops.push(server.close);
  // The engine worker is refused too: the engine runs in the page, saying why.
  const r = await outcome(`${server.origin}/`);
  assertAnswered(r, { threads: 1, why: /worker failed to start: its script or one of its imports could not be loaded/ });
  assert.equal(r.info.engine, 'page');
  assert.equal(r.info.workerFallback?.code, 'E_WORKER', JSON.stringify(r.info.workerFallback));
});

test('webpack 5 build: answers on one thread, saying why (webpack replaces import.meta.url at build time)', async () => {
  const server = await serve({ root: join(WORK, 'webpack-app', 'dist'), files: { '/model.gguf': MODEL_PATH }, headers: ISOLATED });
  stops.push(server.close);
  assertAnswered(await outcome(`${server.origin}/index.html`), { threads: 1, why: /bundler replaced import\.meta\.url/ });
});

test('webpack 5 build, not isolated: answers on one thread', async () => {
  const server = await serve({ root: join(WORK, 'webpack-app', 'dist'), files: { '/model.gguf': MODEL_PATH } });
  stops.push(server.close);
  assertAnswered(await outcome(`${server.origin}/index.html`), { threads: 1, why: /not cross-origin isolated/ });
});

test('webpack 5 build, shared: true: the SharedWorker is bundled and answers', async () => {
  const server = await serve({ root: join(WORK, 'webpack-app', 'dist'), files: { '/model.gguf': MODEL_PATH } });
  stops.push(server.close);
  const r = await outcome(`${server.origin}/index.html?engine=shared`);
  assertAnswered(r, { threads: 1, why: /not cross-origin isolated/ });
  assert.equal(r.info.engine, 'shared');
});
