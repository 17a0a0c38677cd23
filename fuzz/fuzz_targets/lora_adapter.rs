#![no_main]
//! Any bytes as a LoRA adapter for tiny-llama-spm (make_tiny_models.py's, in $RUVLLM_FIXTURES): a typed error, or
//! an adapter whose pairs all fit the model, which then runs a forward pass with it.

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use ruvllm::{AdapterSet, LoraAdapter, Model, Session};

fn model() -> &'static Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = std::env::var("RUVLLM_FIXTURES").expect("RUVLLM_FIXTURES names the tiny models' folder (scripts/fuzz.sh sets it)");
        let bytes = std::fs::read(format!("{dir}/tiny-llama-spm.gguf")).expect("tiny-llama-spm.gguf (make_tiny_models.py)");
        Arc::new(Model::from_bytes(bytes).expect("the tiny model loads"))
    })
}

fuzz_target!(|data: &[u8]| {
    let model = model();
    let Ok(adapter) = LoraAdapter::from_bytes(model, data.to_vec()) else { return };
    let mut session = Session::new(model.clone());
    session.set_adapters(&AdapterSet::new(vec![(Arc::new(adapter), 1.0)])).expect("an adapter read for this model");
    let logits = session.eval(&[1, 2, 3], false).expect("eval");
    assert_eq!(logits.len(), model.config.vocab_size);
});
