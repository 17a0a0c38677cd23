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

in_browser!(
    matvec_norm_segments_and_bias_match_cpu_for_every_type,
    matvec_residual_add_and_swiglu_match_cpu_for_every_type,
    matmul_tiles_match_cpu_for_every_type,
    split_matmul_partials_sum_to_the_product,
    embedding_rows_match_dequantize_for_every_type,
    rope_and_kv_store_match_cpu_normal_and_neox,
    decode_attention_with_rope_and_kv_store_matches_cpu,
    prefill_attention_is_causal_and_matches_cpu,
    rmsnorm_and_swiglu_match_cpu,
    argmax_picks_the_lowest_id_of_the_largest_logit_and_skips_nan,
    shader_and_buffer_failures_are_typed_errors,
);
