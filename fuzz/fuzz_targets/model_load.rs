#![no_main]
//! Any bytes as a model file: a model or a typed error. A model that loads answers its questions. The same bytes
//! laid into pieces (as wasm32 holds a file above 2 GiB) give a typed error or the same model. The same bytes as the
//! first bytes of a file, read for the text side alone (`TextModel::from_header`): a text side that answers, a
//! request for more bytes, or a typed error; where the model loads, its text side.

use libfuzzer_sys::fuzz_target;
use ruvllm::gguf::bytes::{ModelBytes, ModelBytesBuilder};
use ruvllm::gguf::Prefix;
use ruvllm::{ChatMessage, Model, RenderOptions, Result, TextModel};

fn in_pieces(data: &[u8]) -> Result<ModelBytes> {
    let mut builder = ModelBytesBuilder::new(Some(data.len()), (data.len() / 3).max(1))?;
    for chunk in data.chunks(1000) {
        builder.push(chunk)?;
    }
    Ok(builder.finish())
}

fuzz_target!(|data: &[u8]| {
    let text = TextModel::from_header(data);
    if let Ok(Prefix::Complete(text)) = &text {
        let t = text.tokenizer();
        if let Ok(ids) = t.encode_with_special("<|im_start|>user\nHi, wörld!<|im_end|>", true) {
            t.decode(&ids).expect("the ids of a text decode");
        }
        let _ = (text.name(), text.architecture());
        let _ = text.chat_prompt_ids(&[ChatMessage::new("user", "Hi")], &RenderOptions::default(), false);
    }
    let whole = Model::from_bytes(data.to_vec());
    if let Ok(pieced) = in_pieces(data).and_then(Model::from_bytes) {
        let whole = whole.as_ref().expect("a file that loads in pieces loads whole");
        assert_eq!((pieced.id(), pieced.file_size()), (whole.id(), whole.file_size()));
    }
    let Ok(model) = whole else { return };
    let Ok(Prefix::Complete(text)) = text else { panic!("a model loads, but not its text side alone: {text:?}") };
    assert_eq!((text.name(), text.tokenizer().vocab_size()), (model.name(), model.config.vocab_size));
    let t = model.tokenizer();
    assert_eq!(t.vocab_size(), model.config.vocab_size);
    let _ = (model.name(), model.file_size(), t.bos(), t.eos(), t.adds_bos(), t.eog_ids());
    let _ = model.chat_template().map(|c| format!("{c:?}"));
    let last = t.vocab_size() as u32 - 1;
    let _ = (t.decode(&[0, last]).unwrap(), t.token_text(last), t.is_control(last), t.is_eog(last));
});
