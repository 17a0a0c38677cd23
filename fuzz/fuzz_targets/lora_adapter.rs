#![no_main]
//! LoRA adapters for tiny-llama-spm (make_tiny_models.py's, in $RUVLLM_FIXTURES), two readers of outside bytes:
//! - any bytes as a GGUF adapter file: a typed error, or an adapter whose pairs all fit the model, which then runs a
//!   forward pass with it;
//! - input starting with `M`: a saved MicroLoRA state, edited. The rest of the input picks the options of a real
//!   state (and whether it has taken a step), then flips bytes of it, cuts it, and fixes its checksum or not, so that
//!   the edits reach past the checksum. The reader gives a typed error or a state that writes back as it was read
//!   and trains a step.

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use ruvllm::model::lora::Proj;
use ruvllm::training::{MicroLora, MicroLoraOptions};
use ruvllm::{AdapterSet, LoraAdapter, Model, Session};

fn model() -> &'static Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = std::env::var("RUVLLM_FIXTURES")
            .expect("RUVLLM_FIXTURES names the tiny models' folder (scripts/fuzz.sh sets it)");
        let bytes =
            std::fs::read(format!("{dir}/tiny-llama-spm.gguf")).expect("tiny-llama-spm.gguf (make_tiny_models.py)");
        Arc::new(Model::from_bytes(bytes).expect("the tiny model loads"))
    })
}

fn adapter_file(data: &[u8]) {
    let model = model();
    let Ok(adapter) = LoraAdapter::from_bytes(model, data.to_vec()) else { return };
    let mut session = Session::new(model.clone());
    session.set_adapters(&AdapterSet::new(vec![(Arc::new(adapter), 1.0)])).expect("an adapter read for this model");
    let logits = session.eval(&[1, 2, 3], false).expect("eval");
    assert_eq!(logits.len(), model.config.vocab_size);
}

fn microlora_state(data: &[u8]) {
    let model = model();
    let [rank, layers, mask, flags, edits @ ..] = data else { return };
    let options = MicroLoraOptions {
        rank: 1 + *rank as usize % 4,
        layers: 1 + *layers as usize % model.config.n_layers,
        projections: Proj::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| (1 + *mask as usize % 127) >> i & 1 == 1)
            .map(|(_, &p)| p)
            .collect(),
        ..MicroLoraOptions::default()
    };
    let mut lora = MicroLora::new(model, options).expect("valid options");
    if flags & 1 == 1 {
        lora.train_step(model, &[1, 2, 3, 4, 5], 2, if flags & 2 == 0 { 1.0 } else { -1.0 }).expect("a step");
    }
    let mut bytes = lora.to_bytes(model);
    // Edits: (offset u16, xor u8) triples; with flag 4 the last edit's offset cuts the bytes there.
    for e in edits.chunks_exact(3) {
        let at = u16::from_le_bytes([e[0], e[1]]) as usize % bytes.len();
        bytes[at] ^= e[2];
    }
    if flags & 4 == 4 {
        if let Some(e) = edits.chunks_exact(3).last() {
            bytes.truncate(u16::from_le_bytes([e[0], e[1]]) as usize % bytes.len());
        }
    }
    if flags & 8 == 0 && bytes.len() >= 4 {
        let n = bytes.len() - 4;
        let (body, crc) = bytes.split_at_mut(n);
        crc.copy_from_slice(&crc32fast::hash(body).to_le_bytes());
    }
    let Ok(mut read) = MicroLora::from_bytes(model, &bytes) else { return };
    assert_eq!(read.to_bytes(model), bytes, "a state read back writes back as it was");
    let _ = read.train_step(model, &[1, 2, 3, 4, 5], 2, 1.0).expect("a step of a state that was read");
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((b'M', rest)) => microlora_state(rest),
        _ => adapter_file(data),
    }
});
