//! Writes a copy of a `llama` GGUF model in a K-quant mix, as `llama-quantize --allow-requantize M.gguf OUT.gguf
//! Q4_K_M` would: the compare bench's Q4_K_M model, the type most published GGUFs come in (gguf-py, which
//! `requantize.py` uses for Q8_0 / Q4_0, cannot quantize K types).
//!
//!   cargo bench -p ruvllm --bench requantize_k -- --from M.gguf --out OUT.gguf [--mix q4_k_m | q5_k_m]
//!
//! What the file is:
//! * Each tensor's type from llama.cpp's rules (`model_writer.rs`). For SmolLM2-135M (d_model 576, which 256-element
//!   K blocks do not tile) most matrices take llama.cpp's fallback: Q5_0 for Q4_K, Q8_0 for Q6_K, and Q8_0 for the
//!   tied embedding / output head; only `ffn_down`, whose rows are 1536 long, is a K type.
//! * Weights dequantized from the source's types and quantized again with our reference quantizers (ggml's, without
//!   an importance matrix, as llama-quantize without `--imatrix`). A tensor whose type stays is copied byte for byte,
//!   as llama-quantize does; so are norms.
//! * All metadata copied, `general.file_type` set to the mix's and `general.quantization_version` to 2, as
//!   llama-quantize sets them; tensors in llama-quantize's order (by layer number, then name).
//!
//! It prints the count of tensors per type; the file is kept only once it loads and gives finite logits.

#[allow(dead_code)] // the writer's other metadata variants are for the tests
#[path = "../tests/rust/support/gguf_writer.rs"]
mod gguf_writer;
#[path = "model_writer.rs"]
mod model_writer;

use gguf_writer::{GgufWriter, Meta};
use model_writer::{write_checked, Mix};
use rayon::prelude::*;
use ruvllm::gguf::{Gguf, Value};
use ruvllm::quant::{dequantize_row, quantize_row, GgmlType};
use std::collections::BTreeMap;

fn main() {
    if let Err(e) = run() {
        eprintln!("requantize_k: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let src = opt("--from").ok_or("--from M.gguf")?;
    let out = opt("--out").ok_or("--out OUT.gguf")?;
    let mix_name = opt("--mix").unwrap_or("q4_k_m".into());
    let mix = Mix::parse(&mix_name)?;
    let t0 = std::time::Instant::now();

    let bytes = std::fs::read(&src).map_err(|e| format!("{src}: {e}"))?;
    let g = Gguf::parse(&bytes).map_err(|e| format!("{src}: {e}"))?;
    // The rules are llama.cpp's for this architecture only, and the writer aligns tensors to 32 bytes.
    let arch = g.get("general.architecture").and_then(Value::as_str);
    if arch != Some("llama") {
        return Err(format!("{src}: architecture {arch:?}, the mix's rules here are llama's"));
    }
    if g.alignment != 32 {
        return Err(format!("{src}: alignment {} (the writer's is 32)", g.alignment));
    }
    let n_layers = g.get("llama.block_count").and_then(Value::as_u64).ok_or("no llama.block_count")? as usize;
    let tied = g.tensor("output.weight").is_none();

    let mut w = GgufWriter::new();
    for (key, value) in &g.metadata {
        let value = match key.as_str() {
            "general.file_type" => Meta::U32(mix.file_type()),
            "general.quantization_version" => Meta::U32(2),
            _ => Meta::of(value)?,
        };
        w = w.meta(key, value);
    }
    for (key, value) in [("general.file_type", mix.file_type()), ("general.quantization_version", 2)] {
        if !g.metadata.contains_key(key) {
            w = w.meta(key, Meta::U32(value));
        }
    }

    // llama-quantize's order: tensors outside the layers first, then by layer number, each by name.
    let layer_of = |name: &str| name.strip_prefix("blk.").and_then(|s| s.split('.').next()?.parse::<i64>().ok());
    let mut tensors: Vec<_> = g.tensors.iter().collect();
    tensors.sort_by(|a, b| (layer_of(&a.name).unwrap_or(-1), &a.name).cmp(&(layer_of(&b.name).unwrap_or(-1), &b.name)));
    let mut counts = BTreeMap::<String, usize>::new();
    for t in tensors {
        let data = t.data(&bytes);
        let ty = mix.tensor_type(&t.name, &t.dims, n_layers, tied).unwrap_or(t.ty);
        let new = if ty == t.ty { data.to_vec() } else { requantize(data, t.ty, ty, t.dims[0]) };
        *counts.entry(format!("{ty:?}")).or_default() += 1;
        let dims: Vec<u64> = t.dims.iter().map(|&d| d as u64).collect();
        w = w.tensor(&t.name, &dims, ty as u32, new);
    }
    let out_bytes = w.bytes();
    drop(w);
    let n_bytes = out_bytes.len();
    let (model, lo, hi) = write_checked(&out, out_bytes)?;
    let counts: Vec<String> = counts.iter().map(|(ty, n)| format!("{ty} x {n}")).collect();
    eprintln!(
        "requantize_k: {out}: {n_bytes} bytes, {} layers, logits in [{lo:.3}, {hi:.3}], in {:.1} s",
        model.config.n_layers,
        t0.elapsed().as_secs_f64()
    );
    println!("{}: {}", mix_name.to_uppercase(), counts.join(", "));
    Ok(())
}

/// Rows of `cols` elements of type `from` dequantized and quantized again to `to`, row by row on rayon's threads.
fn requantize(src: &[u8], from: GgmlType, to: GgmlType, cols: usize) -> Vec<u8> {
    let row_bytes = |ty: GgmlType| cols / ty.block_size() * ty.block_bytes();
    let mut out = vec![0u8; src.len() / row_bytes(from) * row_bytes(to)];
    out.par_chunks_mut(row_bytes(to)).zip(src.par_chunks(row_bytes(from))).for_each_init(
        || vec![0f32; cols],
        |x, (dst, row)| {
            dequantize_row(from, row, x);
            quantize_row(to, x, dst);
        },
    );
    out
}
