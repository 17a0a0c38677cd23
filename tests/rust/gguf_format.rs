//! The GGUF reader on well-formed files: every metadata value type (nested arrays too), both
//! supported versions, custom alignment, and tensor offsets. Runs natively and on wasm32 (Node).

#[path = "support/mod.rs"]
mod support;

use ruvllm::gguf::{Gguf, Value};
use ruvllm::quant::GgmlType;
use support::gguf_writer::{GgufWriter, Meta};
use support::test;

#[test]
fn every_metadata_value_type_is_read() {
    for version in [2, 3] {
        let mut w = GgufWriter::new()
            .meta("u8", Meta::U8(200))
            .meta("i8", Meta::I8(-100))
            .meta("u16", Meta::U16(60_000))
            .meta("i16", Meta::I16(-30_000))
            .meta("u32", Meta::U32(4_000_000_000))
            .meta("i32", Meta::I32(-2_000_000_000))
            .meta("f32", Meta::F32(1.5))
            .meta("bool", Meta::Bool(true))
            .meta("str", Meta::Str("héllo".into()))
            .meta("u64", Meta::U64(u64::MAX))
            .meta("i64", Meta::I64(i64::MIN))
            .meta("f64", Meta::F64(-2.25))
            .meta("strs", Meta::StrArray(vec!["a".into(), "".into(), "ü".into()]))
            .meta("nested", Meta::U32Arrays(vec![vec![1, 2], vec![], vec![3]]));
        w.version = version;
        let g = Gguf::parse(&w.bytes()).unwrap();
        assert_eq!(g.version, version);
        assert_eq!(g.get("u8"), Some(&Value::U8(200)));
        assert_eq!(g.get("i8"), Some(&Value::I8(-100)));
        assert_eq!(g.get("u16"), Some(&Value::U16(60_000)));
        assert_eq!(g.get("i16"), Some(&Value::I16(-30_000)));
        assert_eq!(g.get_u64("u32"), Some(4_000_000_000));
        assert_eq!(g.get("i32").and_then(Value::as_i64), Some(-2_000_000_000));
        assert_eq!(g.get_f32("f32"), Some(1.5));
        assert_eq!(g.get_bool("bool"), Some(true));
        assert_eq!(g.get_str("str"), Some("héllo"));
        assert_eq!(g.get_u64("u64"), Some(u64::MAX));
        assert_eq!(g.get("i64"), Some(&Value::I64(i64::MIN)));
        assert_eq!(g.get("f64"), Some(&Value::F64(-2.25)));
        assert_eq!(g.get_str_array("strs"), Some(vec!["a", "", "ü"]));
        let nested = g.get("nested").and_then(Value::as_array).unwrap();
        let nested: Vec<Vec<u64>> =
            nested.iter().map(|a| a.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()).collect();
        assert_eq!(nested, vec![vec![1, 2], vec![], vec![3]]);
    }
}

#[test]
fn tensor_table_offsets_and_alignment() {
    let q = vec![7u8; 18 * 2]; // two Q4_0 blocks
    let f = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect::<Vec<u8>>();
    let w = GgufWriter::new().tensor("q", &[32, 2], 2, q.clone()).tensor("f", &[8], 0, f.clone());
    let bytes = w.bytes();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.alignment, 32);
    assert_eq!(g.data_offset % 32, 0);
    let tq = g.tensor("q").unwrap();
    assert_eq!((tq.ty, tq.dims.clone(), tq.size, tq.n_elements()), (GgmlType::Q4_0, vec![32, 2], 36, 64));
    assert_eq!(tq.data(&bytes), &q[..]);
    let tf = g.tensor("f").unwrap();
    assert_eq!(tf.offset, g.data_offset as u64 + 64, "the second tensor starts at the next 32-byte boundary");
    assert_eq!(tf.data(&bytes), &f[..]);

    // A declared alignment that is not a power of two is refused.
    let w = GgufWriter::new().meta("general.alignment", Meta::U32(24));
    assert!(Gguf::parse(&w.bytes()).unwrap_err().to_string().contains("power of two"));
}
