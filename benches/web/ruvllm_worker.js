// Worker side of web/ruvllm.html: loads the wasm-bindgen `--target web` build served at /ruvllm/ (npm/wasm, or the
// threaded npm/wasm-mt) and runs the same measurement as the Node bench (lib/engine_bench.js).
import init, * as ruvllm from '/ruvllm/ruvllm.js';
import { benchEngine } from '/lib/engine_bench.js';

self.onmessage = async ({ data: cfg }) => {
  try {
    // Load = fetching the GGUF + compiling the wasm + parsing the model into wasm memory + the session.
    const t0 = performance.now();
    const bytes = new Uint8Array(await (await fetch(cfg.modelUrl)).arrayBuffer());
    const fetchMs = performance.now() - t0;
    await init({ module_or_path: '/ruvllm/ruvllm_bg.wasm' });
    // The threaded wasm build (wasm-bindgen-rayon) exports initThreadPool(n), which starts n workers sharing this
    // module's memory (its forward passes run on them, so it needs a pool even for one thread). The single-thread
    // build has no such export.
    if (typeof ruvllm.initThreadPool === 'function') {
      await ruvllm.initThreadPool(cfg.threads);
    } else if (cfg.threads > 1) {
      throw new Error(`${cfg.threads} threads need the threaded wasm build (this one has no initThreadPool); see benches/README.md`);
    }
    const engine = new ruvllm.Engine(bytes, cfg.ctx);
    const loadMs = performance.now() - t0;

    const b = await benchEngine(engine, cfg.promptIds, cfg);
    self.postMessage({
      ok: true,
      result: {
        threads: cfg.threads,
        loadMs,
        promptTokens: b.promptTokens,
        genTokens: b.genTokens,
        runs: b.runs,
        extra: {
          load_fetch_ms: Math.round(fetchMs),
          simd128: b.info.simd128,
          relaxed_simd: b.info.relaxed_simd,
          engine_threads: b.info.threads,
          cross_origin_isolated: self.crossOriginIsolated,
          wasm_memory_mb: Math.round(b.info.wasm_memory_bytes / 1e5) / 10,
          kv_cache_mb: Math.round(b.info.kv_cache_bytes / 1e5) / 10,
          decode_text: b.decodeText,
        },
      },
    });
    engine.free();
  } catch (e) {
    self.postMessage({ ok: false, error: String(e?.stack ?? e) });
  }
};
