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
