//! Every WGSL kernel against the CPU reference in headless Chromium (WebGPU on SwiftShader): the
//! checks of crate/src/gpu/tests.rs, which natively run on Mesa lavapipe, here through the browser's
//! WebGPU. Run: `cargo test --target wasm32-unknown-unknown -p ruvllm --features gpu --test gpu_browser`
//! (chromedriver on PATH; tests/browser/webdriver.json passes --enable-unsafe-webgpu to Chromium).
#![cfg(target_arch = "wasm32")]

use ruvllm::gpu::tests as checks;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

macro_rules! in_browser {
    ($($name:ident),* $(,)?) => {$(
        #[wasm_bindgen_test]
        async fn $name() {
            checks::$name().await;
        }
    )*};
}

ruvllm::for_each_gpu_check!(in_browser);

#[path = "support/mod.rs"]
#[allow(unused)]
mod support;

use std::sync::Arc;

use ruvllm::gpu::{GpuModel, GpuModelStream, GpuOptions, GpuSession};
use support::tiny;
use wasm_bindgen::JsCast;

/// A model file past 4 GiB, wasm32's whole address space, streams to the GPU: the tiny llama after 5 GiB of padding
/// (`tiny::past_4_gib`: its tensors past 4 GiB, the file never held) gives the logits of the file loaded whole, and
/// the wasm memory stays under 1 GiB. (The file server of tests/browser/with-file-server.mjs serves the fixture.)
#[wasm_bindgen_test]
async fn a_file_past_4_gib_streams_to_the_gpu_without_a_copy_in_memory() {
    let opts = GpuOptions { allow_software: true, ..GpuOptions::default() };
    let prompt = [1u32, 17, 33, 99, 5, 250];
    let logits = |gm: GpuModel| async move {
        let mut s = GpuSession::new(Arc::new(gm), 64, 8).await.unwrap();
        let mut out = Vec::new();
        s.eval(&prompt, 0, true, &mut out).await.unwrap();
        out
    };
    let (whole, _) = tiny::load(tiny::LLAMA_SPM);
    let want = logits(GpuModel::new(whole, &opts).await.unwrap()).await;

    let (parts, len) = tiny::past_4_gib(tiny::LLAMA_SPM);
    let mut s = GpuModelStream::new(len, &opts).await.unwrap();
    for chunk in tiny::chunks(&parts) {
        s.push(chunk).await.unwrap();
    }
    let gm = s.finish().unwrap().into_gpu_model().await.unwrap();
    assert!(gm.model().weights.token_embd.offset > 5 << 30);
    assert_eq!(logits(gm).await, want);
    let memory = wasm_bindgen::memory().unchecked_into::<js_sys::WebAssembly::Memory>();
    let bytes = memory.buffer().unchecked_into::<js_sys::ArrayBuffer>().byte_length();
    assert!(bytes < 1 << 30, "wasm memory {bytes} bytes");
}
