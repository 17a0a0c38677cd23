#![no_main]
//! Any bytes as a GGUF header: a header whose tensors all lie inside the bytes, or a typed error. The same bytes cut
//! before each "GGUF" after the first bytes (at most 8 cuts) are a split model's shards laid end to end: one header
//! over them whose tensors all lie inside one piece, or a typed error.

use libfuzzer_sys::fuzz_target;
use ruvllm::gguf::bytes::ModelBytes;
use ruvllm::gguf::Gguf;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = Gguf::parse(data) {
        assert!(g.data_offset <= data.len() || g.tensors.is_empty());
        for t in &g.tensors {
            assert!(t.offset.checked_add(t.size).is_some_and(|end| end <= data.len()), "{t:?}");
        }
        let _ = g.architecture();
        for key in g.metadata.keys() {
            let _ = (g.get_str(key), g.get_u64(key), g.get_f32(key), g.get_bool(key), g.get_str_array(key));
        }
    }
    let mut cuts: Vec<usize> =
        data.windows(4).enumerate().filter(|(i, w)| *i > 0 && *w == b"GGUF").map(|(i, _)| i).take(8).collect();
    if cuts.is_empty() {
        return;
    }
    cuts.insert(0, 0);
    cuts.push(data.len());
    let shards = cuts.windows(2).map(|c| ModelBytes::from(data[c[0]..c[1]].to_vec())).collect();
    let model = ModelBytes::from_shards(shards);
    let Ok(g) = model.gguf() else { return };
    for t in &g.tensors {
        // `gguf` checked that the tensor lies within one piece: `get` must not panic.
        assert_eq!(model.get(t.offset..t.offset + t.size).len(), t.size);
    }
});
