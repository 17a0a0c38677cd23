#![no_main]
//! Any bytes as a model file: a model or a typed error. A model that loads answers its questions.

use libfuzzer_sys::fuzz_target;
use ruvllm::Model;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = Model::from_bytes(data.to_vec()) else { return };
    let t = model.tokenizer();
    assert_eq!(t.vocab_size(), model.config.vocab_size);
    let _ = (model.name(), model.file_size(), t.bos(), t.eos(), t.adds_bos(), t.eog_ids());
    let _ = model.chat_template().map(|c| format!("{c:?}"));
    let last = t.vocab_size() as u32 - 1;
    let _ = (t.decode(&[0, last]).unwrap(), t.token_text(last), t.is_control(last), t.is_eog(last));
});
