#![no_main]
//! Any bytes as a GGUF header: a header whose tensors all lie inside the bytes, or a typed error. The same bytes as
//! the first bytes of a file (`Gguf::parse_prefix`, what header-only readers use): the same header where the whole
//! file parses, else a typed error or a request for more bytes than there are, never past `MAX_HEADER_FILE_BYTES`.
//! The same bytes cut before each "GGUF" after the first bytes (at most 8 cuts) are a split model's shards laid end
//! to end: one header over them whose tensors all lie inside one piece, or a typed error.

use libfuzzer_sys::fuzz_target;
use ruvllm::gguf::bytes::ModelBytes;
use ruvllm::gguf::{Gguf, Prefix, MAX_HEADER_FILE_BYTES};

fuzz_target!(|data: &[u8]| {
    let whole = Gguf::parse(data);
    match Gguf::parse_prefix(data, None) {
        Ok(Prefix::Complete(h)) => {
            assert!(h.header_bytes <= data.len() && h.header_bytes <= h.data_offset);
            if let Ok(g) = &whole {
                // Debug, not ==: a NaN in the metadata is not equal to itself.
                assert_eq!(format!("{:?}", (&h.metadata, &h.tensors)), format!("{:?}", (&g.metadata, &g.tensors)));
            }
            // The header alone is all a prefix needs.
            assert!(matches!(Gguf::parse_prefix(&data[..h.header_bytes], None), Ok(Prefix::Complete(_))));
        }
        Ok(Prefix::Need(n)) => {
            assert!(n > data.len() && n <= MAX_HEADER_FILE_BYTES, "need {n} of a prefix of {}", data.len());
            assert!(whole.is_err(), "a header that parses whole asked for more");
        }
        Err(_) => {}
    }
    if let Ok(g) = &whole {
        let stated = Gguf::parse_prefix(data, Some(data.len() as u64));
        assert!(matches!(stated, Ok(Prefix::Complete(ref h)) if h.tensors == g.tensors), "{stated:?}");
        assert!(g.data_offset <= data.len() || g.tensors.is_empty());
        for t in &g.tensors {
            assert!(t.offset.checked_add(t.size as u64).is_some_and(|end| end <= data.len() as u64), "{t:?}");
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
        assert_eq!(model.get(t.range()).len(), t.size);
    }
});
