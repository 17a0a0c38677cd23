// The npm package's WebGPU backend in headless Chromium with --enable-unsafe-webgpu (the adapter is
// SwiftShader, a CPU implementation of the GPU: slow, so these tests keep forward passes few).
// - backend "webgpu" answers the France prompt's first token on the GPU path, the file streamed to the GPU (not held in
//   wasm memory: the other "webgpu" cases below load that way too);
// - on the tiny llama, the next turn, asked again after reset(), starts from the prefix cache (pages read back from
//   the GPU) with the same answer;
// - backend "auto" finishes a generation on the CPU when the device is lost mid-generation (the tiny llama);
// - limits too small: E_GPU_LIMITS under "webgpu", the CPU under "auto";
// - "auto" skips SwiftShader (a software adapter, slower than the CPU engine);
// - a page without WebGPU (navigator.gpu deleted): "auto" answers on the CPU, "webgpu" is E_GPU_NO_ADAPTER;
// - a LoRA adapter runs in the shaders: the GPU's greedy tokens under it are the CPU engine's, not the base model's
//   (the tiny llama: tests/rust/gpu.rs checks the default model's adapter against llama.cpp on lavapipe);
// - Gemma 3 (the tiny fixture: heads of 256, a sliding window of 8 positions, post-norms, GeGLU) and Gemma 4 (layers of
//   two shapes, shared keys and values, per-layer inputs) run on the GPU within WebGPU's default limits and give the
//   CPU engine's greedy tokens past their windows.
// The engine runs in its worker (the browser default), but for the cases that reach into the page (its GPU devices,
// its navigator, the builds it fetched), which load with worker: false.
// Run: node --test tests/browser/webgpu.test.mjs   (after scripts/build-wasm.sh and `npm run build` in npm/)
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { FRANCE, MODEL_PATH, PACKAGE_DIR, REPO_DIR } from '../../npm/test/helpers.mjs';
import { serve } from '../../npm/test/server.mjs';

const { chromium } = createRequire(join(PACKAGE_DIR, 'package.json'))('playwright-core');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const ARGS = ['--no-sandbox', '--enable-unsafe-webgpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
// A short context window keeps the GPU's KV cache and the CPU fallback's allocations small.
const CONTEXT = 256;
// tests/fixtures/make_tiny_models.py's llama (SentencePiece) and Gemma 3, and make_lora_adapters.py's rank-4 adapter on
// every projection of that llama: SwiftShader takes most of a minute per token of the default model, and a kernel
// (LoRA's, the CPU fallback after a lost device) runs the same shaders on a small model.
const FIXTURES = process.env.RUVLLM_FIXTURES ?? join(REPO_DIR, 'target', 'fixtures');
const TINY_LLAMA = join(FIXTURES, 'tiny-llama-spm.gguf');
const ADAPTER = join(FIXTURES, 'lora-llama-r4.gguf');
const GEMMA3 = join(FIXTURES, 'tiny-gemma3.gguf');
const GEMMA4 = join(FIXTURES, 'tiny-gemma4.gguf');
// A prompt for the tiny models (their vocabularies are small; any text tokenizes).
const TINY_PROMPT = 'The old fisherman rowed out past the rocks at 7:45, and the sea was calm.';

let server, browser;
const pageErrors = [];

before(async () => {
  server = await serve({ root: PACKAGE_DIR, files: { '/model.gguf': MODEL_PATH, '/tiny-llama.gguf': TINY_LLAMA, '/adapter.gguf': ADAPTER, '/gemma3.gguf': GEMMA3, '/gemma4.gguf': GEMMA4 } });
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** A page of the example (its import map names the package); `init` runs before the page's scripts. */
async function openPage(init) {
  const page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e));
  if (init) await page.addInitScript(init);
  await page.goto(`${server.origin}/examples/browser/index.html`);
  return page;
}

/** Keep each GPUDevice the page requests in window.devices (to lose one on purpose). */
function recordDevices() {
  window.devices = [];
  const request = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (...args) {
    const device = await request.apply(this, args);
    window.devices.push(device);
    return device;
  };
}

test('backend "webgpu" answers the France prompt on the GPU (SwiftShader)', { timeout: 1_200_000 }, async () => {
  // A SwiftShader forward pass of the default model takes minutes on a busy two-core machine, so the GPU answers the
  // reference answer's first token (the prompt's prefill) and no more. The decode kernels and the prefix cache run
  // through the browser's WebGPU on the tiny models below (and every shader against the CPU's in
  // tests/rust/gpu_browser.rs); tests/rust/gpu.rs checks the whole answer on lavapipe, and the CPU fallbacks below
  // check it here.
  const answered = 1;
  const page = await openPage();
  const r = await page.evaluate(
    async ({ prompt, context, answered }) => {
      const { LLM } = await import('@ruvector/ruvllm');
      const t0 = performance.now();
      const llm = await LLM.load('/model.gguf', { backend: 'webgpu', contextSize: context });
      const loadMs = performance.now() - t0;
      const result = await llm.complete(prompt, { temperature: 0, maxTokens: answered });
      return { info: llm.info(), ids: result.ids, timings: result.timings, loadMs };
    },
    { prompt: FRANCE.prompt, context: CONTEXT, answered },
  );
  assert.equal(r.info.backend, 'webgpu');
  assert.equal(r.info.requestedBackend, 'webgpu');
  assert.equal(r.info.fallback, null);
  assert.equal(r.info.weightsInMemory, false, "under 'webgpu' the file streams to the GPU");
  assert.deepEqual(r.ids, FRANCE.ids.slice(0, answered));
  console.log(`WebGPU in Chromium: load ${r.loadMs.toFixed(0)} ms, prefill ${r.timings.prefillMs.toFixed(0)} ms`);
  await page.close();
});

/**
 * One page whose `window.tiny` is the tiny llama on the GPU, shared by the tests below that need it: each load on
 * SwiftShader compiles every pipeline again (minutes on a busy two-core machine).
 */
let tinyPage;
function tinyLlamaPage() {
  tinyPage ??= openPage().then(async (page) => {
    await page.evaluate(async () => {
      const { LLM } = await import('@ruvector/ruvllm');
      window.tiny = await LLM.load('/tiny-llama.gguf', { backend: 'webgpu', contextSize: 128 });
    });
    return page;
  });
  return tinyPage;
}
after(async () => (await tinyPage)?.close());

test('a LoRA adapter on the GPU gives the CPU engine\'s tokens under it', { timeout: 600_000 }, async () => {
  // The CPU engine (in Node) says what the tokens under the adapter are, and that they are not the base model's.
  const options = { temperature: 0, maxTokens: 8, ignoreEos: true, adapters: [{ id: 0, scale: 1 }] };
  const { LLM } = await import(pathToFileURL(join(PACKAGE_DIR, 'dist', 'node.js')).href);
  const cpu = await LLM.load(TINY_LLAMA, { threads: 1, backend: 'cpu' });
  const base = (await cpu.complete(TINY_PROMPT, { ...options, adapters: [] })).ids;
  options.adapters[0].id = await cpu.loadAdapter(ADAPTER);
  const expected = (await cpu.complete(TINY_PROMPT, options)).ids;
  cpu.dispose();
  assert.notDeepEqual(expected, base, 'the adapter changes the answer');
  const page = await tinyLlamaPage();
  const r = await page.evaluate(
    async ({ prompt, options }) => {
      const llm = window.tiny;
      options.adapters[0].id = await llm.loadAdapter('/adapter.gguf');
      const adapted = await llm.complete(prompt, options);
      llm.unloadAdapter(options.adapters[0].id);
      return { info: llm.info(), ids: adapted.ids };
    },
    { prompt: TINY_PROMPT, options },
  );
  assert.equal(r.info.backend, 'webgpu');
  assert.equal(r.info.fallback, null, 'the session under the adapter stayed on the GPU');
  assert.deepEqual(r.ids, expected);
});

test('the next turn on the GPU, asked again after reset(), starts from the prefix cache with the same answer', { timeout: 600_000 }, async () => {
  // The tiny llama: the next turn continues from the conversation the GPU holds; asked again after reset(), only the
  // prefix cache (pages read back from the GPU when each generation ended) can supply its start. Token ids, not text,
  // so that the second turn begins with exactly the first turn's tokens.
  const page = await tinyLlamaPage();
  const r = await page.evaluate(
    async ({ prompt }) => {
      const llm = window.tiny;
      await llm.reset();
      const options = { temperature: 0, maxTokens: 4, ignoreEos: true };
      // A prompt no earlier test asked, so that no page of the prefix cache starts it.
      const promptIds = llm.tokenize(`${prompt} The nets came up full.`, { prompt: true });
      const first = await llm.complete(promptIds, options);
      const turn2 = [...promptIds, ...first.ids, ...llm.tokenize(' And after that?')];
      const held = await llm.complete(turn2, options);
      await llm.reset();
      const restored = await llm.complete(turn2, options);
      const turns = [first, held, restored].map((t) => ({ ids: t.ids, prompt: t.usage.promptTokens, cached: t.usage.cachedTokens }));
      return { info: llm.info(), prompt: promptIds.length, turns };
    },
    { prompt: TINY_PROMPT },
  );
  assert.equal(r.info.backend, 'webgpu');
  assert.equal(r.info.fallback, null);
  const [first, held, restored] = r.turns;
  assert.equal(first.cached, 0, JSON.stringify(r.turns));
  // The session held at least the first turn's prompt and answer but its last token (sampled, not evaluated).
  assert.ok(held.cached >= r.prompt + first.ids.length - 1, JSON.stringify(r));
  // The prefix cache restores whole pages of 16 tokens, and never the prompt's last token (its logits are needed).
  assert.equal(restored.cached, Math.floor((restored.prompt - 1) / 16) * 16, JSON.stringify(r.turns));
  assert.ok(restored.cached > 0 && r.info.prefixCache.restoredTokens >= restored.cached, JSON.stringify(r.info.prefixCache));
  assert.deepEqual(restored.ids, held.ids, 'the same answer from the prefix cache');
});

test('Gemma 3 and 4 (tiny: heads of 256; of 64 and 128, shared KV, per-layer inputs; windows of 8) on the GPU give the CPU engine\'s greedy tokens past their windows', { timeout: 600_000 }, async () => {
  const prompt = TINY_PROMPT;
  const options = { temperature: 0, maxTokens: 12, ignoreEos: true };
  const { LLM } = await import(pathToFileURL(join(PACKAGE_DIR, 'dist', 'node.js')).href);
  for (const [architecture, file] of [['gemma3', GEMMA3], ['gemma4', GEMMA4]]) {
    const cpu = await LLM.load(file, { threads: 1, backend: 'cpu' });
    const expected = await cpu.complete(prompt, options);
    cpu.dispose();
    assert.ok(expected.usage.promptTokens + expected.ids.length > 2 * 8, JSON.stringify(expected.usage));
    const page = await openPage();
    const r = await page.evaluate(
      async ({ url, prompt, options }) => {
        const { LLM } = await import('@ruvector/ruvllm');
        const llm = await LLM.load(url, { backend: 'webgpu', contextSize: 128 });
        const out = await llm.complete(prompt, options);
        return { info: llm.info(), ids: out.ids };
      },
      { url: `/${architecture}.gguf`, prompt, options },
    );
    assert.equal(r.info.architecture, architecture);
    assert.equal(r.info.backend, 'webgpu');
    assert.equal(r.info.fallback, null, `${architecture} stayed on the GPU`);
    assert.deepEqual(r.ids, expected.ids, architecture);
    await page.close();
  }
});

test('backend "auto": a device lost mid-generation, the generation finishes on the CPU', { timeout: 600_000 }, async () => {
  const options = { temperature: 0, maxTokens: 8, ignoreEos: true };
  const { LLM } = await import(pathToFileURL(join(PACKAGE_DIR, 'dist', 'node.js')).href);
  const cpu = await LLM.load(TINY_LLAMA, { threads: 1, backend: 'cpu' });
  const expected = (await cpu.complete(TINY_PROMPT, options)).ids;
  cpu.dispose();
  const page = await openPage(recordDevices);
  const r = await page.evaluate(
    async ({ prompt, options }) => {
      const { LLM } = await import('@ruvector/ruvllm');
      // SwiftShader is a software adapter, which "auto" would skip (slower than the CPU engine):
      // gpuAllowSoftware lets this test run "auto" on it.
      // In the page (worker: false): the page's init script recorded the devices this test destroys.
      const llm = await LLM.load('/tiny-llama.gguf', { backend: 'auto', contextSize: 128, gpuAllowSoftware: true, worker: false });
      const before = llm.info();
      const ids = [];
      for await (const chunk of llm.generate(prompt, options)) {
        ids.push(chunk.id);
        if (ids.length === 1) window.devices.forEach((d) => d.destroy());
      }
      return { before, after: llm.info(), ids };
    },
    { prompt: TINY_PROMPT, options },
  );
  assert.equal(r.before.backend, 'webgpu');
  assert.equal(r.before.weightsInMemory, true, "under 'auto' the file stays in memory for the CPU");
  assert.equal(r.after.backend, 'cpu');
  assert.equal(r.after.fallback?.code, 'E_GPU_DEVICE_LOST', JSON.stringify(r.after.fallback));
  assert.deepEqual(r.ids, expected);
  await page.close();
});

test('limits too small for the model: E_GPU_LIMITS under "webgpu", the CPU under "auto"', { timeout: 300_000 }, async () => {
  const page = await openPage();
  const r = await page.evaluate(
    async ({ prompt, context }) => {
      const { LLM } = await import('@ruvector/ruvllm');
      // No weight row fits in a 256-byte binding.
      const limits = { contextSize: context, gpuMaxBindingBytes: 256, gpuAllowSoftware: true };
      const webgpu = await LLM.load('/model.gguf', { ...limits, backend: 'webgpu' }).then(
        () => 'loaded',
        (e) => `${e.code}: ${e.message}`,
      );
      const llm = await LLM.load('/model.gguf', { ...limits, backend: 'auto' });
      const result = await llm.complete(prompt, { temperature: 0, maxTokens: 8 });
      return { webgpu, info: llm.info(), ids: result.ids };
    },
    { prompt: FRANCE.prompt, context: CONTEXT },
  );
  assert.match(r.webgpu, /^E_GPU_LIMITS: /);
  assert.equal(r.info.backend, 'cpu');
  assert.equal(r.info.fallback?.code, 'E_GPU_LIMITS');
  assert.deepEqual(r.ids, FRANCE.ids);
  await page.close();
});

test('backend "auto" skips a software adapter (SwiftShader) and runs on the CPU', { timeout: 300_000 }, async () => {
  const page = await openPage();
  const r = await page.evaluate(async (context) => {
    const { LLM } = await import('@ruvector/ruvllm');
    const adapter = await navigator.gpu.requestAdapter();
    // In the page (worker: false), whose resource entries show which build it fetched.
    const llm = await LLM.load('/model.gguf', { backend: 'auto', contextSize: context, worker: false });
    const gpuBuildFetched = performance.getEntriesByType('resource').some((e) => e.name.includes('/wasm-gpu/'));
    return { software: adapter.info.isFallbackAdapter, info: llm.info(), gpuBuildFetched };
  }, CONTEXT);
  assert.equal(r.software, true, 'Chromium flags SwiftShader as a fallback adapter');
  assert.equal(r.info.backend, 'cpu');
  assert.equal(r.info.fallback?.code, 'E_GPU_NO_ADAPTER');
  assert.match(r.info.fallback.message, /only a software adapter/);
  assert.equal(r.gpuBuildFetched, false, 'the CPU build runs: the WebGPU build is not even fetched');
  await page.close();
});

test('a page without WebGPU: "auto" answers on the CPU, "webgpu" is E_GPU_NO_ADAPTER', { timeout: 300_000 }, async () => {
  const page = await openPage(() => delete Navigator.prototype.gpu);
  const r = await page.evaluate(
    async ({ prompt, context }) => {
      const { LLM } = await import('@ruvector/ruvllm');
      // In the page (worker: false), where the init script removed WebGPU.
      const webgpu = await LLM.load('/model.gguf', { backend: 'webgpu', contextSize: context, worker: false }).then(
        () => 'loaded',
        (e) => `${e.code}: ${e.message}`,
      );
      const llm = await LLM.load('/model.gguf', { backend: 'auto', contextSize: context, worker: false });
      const result = await llm.complete(prompt, { temperature: 0, maxTokens: 8 });
      const gpuBuildFetched = performance.getEntriesByType('resource').some((e) => e.name.includes('/wasm-gpu/'));
      return { hasGpu: 'gpu' in navigator, webgpu, info: llm.info(), text: result.text, gpuBuildFetched };
    },
    { prompt: FRANCE.prompt, context: CONTEXT },
  );
  assert.equal(r.hasGpu, false);
  assert.match(r.webgpu, /^E_GPU_NO_ADAPTER: WebGPU is not available here/);
  assert.equal(r.info.backend, 'cpu');
  assert.equal(r.info.requestedBackend, 'auto');
  assert.equal(r.info.fallback?.code, 'E_GPU_NO_ADAPTER');
  assert.equal(r.text, FRANCE.text);
  assert.equal(r.gpuBuildFetched, false, 'the CPU build runs: the WebGPU build is not even fetched');
  await page.close();
});

test('no uncaught errors in the pages', () => {
  assert.deepEqual(pageErrors.map(String), []);
});
