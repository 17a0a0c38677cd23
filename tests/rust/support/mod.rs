//! Shared helpers of the Rust integration tests: files and environment on both targets (natively
//! through std, on wasm32 through Node's `fs` and `process.env`), and where the test data lives.
#![allow(dead_code)]

pub mod gguf_writer;
pub mod logits;

#[cfg(target_arch = "wasm32")]
mod node {
    use wasm_bindgen::prelude::*;

    #[wasm_bindgen(module = "fs")]
    extern "C" {
        #[wasm_bindgen(js_name = readFileSync, catch)]
        fn read_file_sync(path: &str) -> Result<Vec<u8>, JsValue>;
    }

    pub fn read(path: &str) -> Result<Vec<u8>, String> {
        read_file_sync(path).map_err(|e| format!("{e:?}"))
    }

    pub fn env(name: &str) -> Option<String> {
        let process = js_sys::Reflect::get(&js_sys::global(), &"process".into()).ok()?;
        let env = js_sys::Reflect::get(&process, &"env".into()).ok()?;
        js_sys::Reflect::get(&env, &name.into()).ok()?.as_string()
    }
}

pub fn env(name: &str) -> Option<String> {
    #[cfg(target_arch = "wasm32")]
    return node::env(name);
    #[cfg(not(target_arch = "wasm32"))]
    return std::env::var(name).ok();
}

pub fn read_file(path: &str) -> Vec<u8> {
    #[cfg(target_arch = "wasm32")]
    let r = node::read(path);
    #[cfg(not(target_arch = "wasm32"))]
    let r = std::fs::read(path).map_err(|e| e.to_string());
    r.unwrap_or_else(|e| panic!("cannot read {path}: {e} (run scripts/setup.sh first)"))
}

/// The default model: $RUVLLM_MODEL, else the cache path scripts/fetch-model.sh uses.
pub fn model_path() -> String {
    env("RUVLLM_MODEL").unwrap_or_else(|| {
        let cache =
            env("RUVLLM_CACHE").unwrap_or_else(|| format!("{}/.cache/ruvllm", env("HOME").expect("HOME is set")));
        format!("{cache}/SmolLM2-135M-Instruct.Q4_1.gguf")
    })
}

/// llama.cpp's reference data: $RUVLLM_REFERENCE_DIR, else ../shared/reference beside the repo.
pub fn reference_dir() -> String {
    env("RUVLLM_REFERENCE_DIR").unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference").into())
}

pub fn read_json(path: &str) -> serde_json::Value {
    serde_json::from_slice(&read_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}
