#![no_main]
//! Any bytes as a GGUF header: a header whose tensors all lie inside the bytes, or a typed error.

use libfuzzer_sys::fuzz_target;
use ruvllm::gguf::Gguf;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    assert!(g.data_offset <= data.len() || g.tensors.is_empty());
    for t in &g.tensors {
        assert!(t.offset.checked_add(t.size).is_some_and(|end| end <= data.len()), "{t:?}");
    }
    let _ = g.architecture();
    for key in g.metadata.keys() {
        let _ = (g.get_str(key), g.get_u64(key), g.get_f32(key), g.get_bool(key), g.get_str_array(key));
    }
});
