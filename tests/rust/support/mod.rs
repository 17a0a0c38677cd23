//! Shared helpers of the Rust integration tests: files and environment on every target, and where
//! the test data lives. Natively they come from std; on wasm32 the same test file may run in Node
//! (through `fs` and `process.env`) or in a headless browser, which has neither: there they come
//! from the test file server (tests/browser/with-file-server.mjs, started by scripts/test.sh).
#![allow(dead_code)]

pub mod gguf_writer;
pub mod logits;
#[cfg(not(target_arch = "wasm32"))]
pub mod schemas;
/// `#[test]` on every target and the tests' generator: the crate's unit tests' own file.
#[path = "../../../crate/src/test_support.rs"]
pub mod test_support;
pub mod tiny;

pub use test_support::test;

use std::sync::{Arc, OnceLock};

use ruvllm::Model;

#[cfg(target_arch = "wasm32")]
mod js {
    use std::collections::HashMap;
    use std::sync::OnceLock;

    use js_sys::{Function, Uint8Array};
    use wasm_bindgen::{JsCast, JsValue};

    /// Where the browser run finds the test file server; scripts/test.sh starts it on this port.
    pub const FILE_SERVER: &str = "http://127.0.0.1:8739";

    /// Call a JS function of one argument, written as its body (Node's `process` and the browser's
    /// `XMLHttpRequest` are globals, so no module import ties the test file to one of them).
    fn call_js(body: &str, arg: &str) -> Result<JsValue, String> {
        Function::new_with_args("arg", body).call1(&JsValue::NULL, &arg.into()).map_err(|e| {
            match e.dyn_into::<js_sys::Error>() {
                Ok(error) => error.message().into(),
                Err(other) => format!("{other:?}"),
            }
        })
    }

    fn in_node() -> bool {
        call_js("return typeof process === 'object' && typeof process.versions?.node === 'string'", "")
            .is_ok_and(|v| v.is_truthy())
    }

    /// GET `url` synchronously. Sync XHR may not ask for an ArrayBuffer in a window, but the
    /// x-user-defined charset maps each byte to one UTF-16 unit whose low 8 bits are the byte.
    fn get(url: &str) -> Result<Vec<u8>, String> {
        let bytes = call_js(
            "const xhr = new XMLHttpRequest();
             try {
               xhr.open('GET', arg, false);
               xhr.overrideMimeType('text/plain; charset=x-user-defined');
               xhr.send();
             } catch (e) {
               throw new Error(`${e.message} Is the test file server running?`);
             }
             if (xhr.status !== 200) throw new Error(`HTTP ${xhr.status} ${xhr.responseText}`);
             const text = xhr.responseText;
             const bytes = new Uint8Array(text.length);
             for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
             return bytes;",
            url,
        )?;
        Ok(Uint8Array::new(&bytes).to_vec())
    }

    pub fn read(path: &str) -> Result<Vec<u8>, String> {
        if in_node() {
            // `require` is not a global in the runner's module; getBuiltinModule is (Node >= 20.16).
            let buffer = call_js("return process.getBuiltinModule('fs').readFileSync(arg)", path)?;
            return Ok(Uint8Array::new(&buffer).to_vec());
        }
        let url = format!("{FILE_SERVER}/file?path={}", String::from(js_sys::encode_uri_component(path)));
        get(&url).map_err(|e| format!("GET {url}: {e}"))
    }

    pub fn env(name: &str) -> Option<String> {
        if in_node() {
            return call_js("return process.env[arg]", name).ok()?.as_string();
        }
        // The browser has no environment: the file server passes on its own (asked for once).
        static SERVER_ENV: OnceLock<HashMap<String, String>> = OnceLock::new();
        let vars = SERVER_ENV.get_or_init(|| {
            let url = format!("{FILE_SERVER}/env");
            let json = get(&url).unwrap_or_else(|e| panic!("GET {url}: {e} (scripts/test.sh starts it)"));
            serde_json::from_slice(&json).unwrap_or_else(|e| panic!("GET {url}: {e}"))
        });
        vars.get(name).cloned()
    }
}

pub fn env(name: &str) -> Option<String> {
    #[cfg(target_arch = "wasm32")]
    return js::env(name);
    #[cfg(not(target_arch = "wasm32"))]
    return std::env::var(name).ok();
}

pub fn read_file(path: &str) -> Vec<u8> {
    #[cfg(target_arch = "wasm32")]
    let r = js::read(path);
    #[cfg(not(target_arch = "wasm32"))]
    let r = std::fs::read(path).map_err(|e| e.to_string());
    r.unwrap_or_else(|e| panic!("cannot read {path}: {e} (run scripts/setup.sh first)"))
}

/// The file at `path`, which must be the one whose SHA-256 a reference recorded (`sha256`, a hex string): else the
/// reference needs `script` run again.
pub fn read_file_made_for(path: &str, sha256: &serde_json::Value, script: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let bytes = read_file(path);
    let sha: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        sha256.as_str(),
        Some(sha.as_str()),
        "{path} is not the file the reference was made from: run {script} again"
    );
    bytes
}

/// The default model: $RUVLLM_MODEL, else the cache path scripts/fetch-model.sh uses.
pub fn model_path() -> String {
    env("RUVLLM_MODEL").unwrap_or_else(|| {
        let cache =
            env("RUVLLM_CACHE").unwrap_or_else(|| format!("{}/.cache/ruvllm", env("HOME").expect("HOME is set")));
        format!("{cache}/SmolLM2-135M-Instruct.Q4_1.gguf")
    })
}

/// The default model, loaded once per test binary.
pub fn default_model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| Arc::new(Model::from_bytes(read_file(&model_path())).expect("the default model loads")))
        .clone()
}

/// llama.cpp's reference data: $RUVLLM_REFERENCE_DIR, else ../shared/reference beside the repo.
pub fn reference_dir() -> String {
    env("RUVLLM_REFERENCE_DIR").unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference").into())
}

pub fn read_json(path: &str) -> serde_json::Value {
    serde_json::from_slice(&read_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}
