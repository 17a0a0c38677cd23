//! Exports for the wasm benches only (feature `bench`, threaded build): pieces of a forward pass timed alone
//! (`benches/matmul_scaling.mjs`), kept here so that no kernel module carries a binding.

use wasm_bindgen::prelude::*;

use crate::kernels::matmul::matmul;
use crate::parallel::{for_each_chunk, in_pool};
use crate::quant::act::Activations;
use crate::quant::{quantize_row, GgmlType, QuantMatrix};

/// For `benches/matmul_scaling.mjs` (feature `bench`, threaded wasm build): decode's matrix products alone, to
/// see how far threads can speed them up on this machine whatever the rest of a forward pass does. One "layer"
/// is the default model's (SmolLM2-135M) four products of one input row, each after quantizing its input:
/// q/k/v 960×576, o 576×576, gate/up 3072×576, down 576×1536, all Q4_1 (2.2 MB); `layers` sets of distinct
/// weights are run in turn, `passes` times, in one forward-like `in_pool`. Returns microseconds per layer.
/// A few layers stay in the caches; 30, as in the model, come from memory every pass, as in decode.
#[wasm_bindgen(js_name = matmulChain)]
pub fn matmul_chain(layers: usize, passes: usize) -> f64 {
    const SHAPES: [(usize, usize); 4] = [(960, 576), (576, 576), (3072, 576), (576, 1536)];
    let ty = GgmlType::Q4_1;
    let x: Vec<f32> = (0..3072 * 576).map(|i| ((i as u64 * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let mut file = Vec::new(); // the matrices one after another, as in a model file
    let mut placed = Vec::new();
    for _ in 0..layers {
        for (rows, cols) in SHAPES {
            let offset = file.len();
            file.resize(offset + ty.row_bytes(rows * cols), 0);
            quantize_row(ty, &x[..rows * cols], &mut file[offset..]);
            placed.push((rows, cols, offset));
        }
    }
    let mats: Vec<QuantMatrix> = (placed.iter())
        .map(|&(rows, cols, offset)| QuantMatrix {
            ty,
            rows,
            cols,
            bytes: &file[offset..][..ty.row_bytes(rows * cols)],
        })
        .collect();
    let mut acts = Activations::new();
    let mut out = vec![0f32; 3072];
    let mut pass = || {
        for m in &mats {
            acts.quantize(ty.act_kind(), &x[..m.cols], 1);
            matmul(&mut [(*m, &mut out[..m.rows])], &acts);
        }
    };
    in_pool(&mut pass); // warm-up: code compiled, weights touched
    let t0 = crate::clock::now_ms();
    in_pool(|| (0..passes).for_each(|_| pass()));
    (crate::clock::now_ms() - t0) * 1e3 / (passes * layers) as f64
}

/// For `benches/matmul_scaling.mjs` (feature `bench`, threaded wasm build): what one parallel loop costs
/// apart from its work, microseconds per loop of `chunks` empty chunks, `loops` of them in one forward-like
/// `in_pool` (decode runs ~150 loops per token; its o-projection is 36 chunks). On two threads this is
/// the handing of the loop to the helper and the wait for its last chunk: round trips between the cores.
#[wasm_bindgen(js_name = emptyLoops)]
pub fn empty_loops(loops: usize, chunks: usize) -> f64 {
    let pass = || (0..loops).for_each(|_| for_each_chunk(chunks, 1, |r| _ = std::hint::black_box(r)));
    in_pool(pass); // warm-up
    let t0 = crate::clock::now_ms();
    in_pool(pass);
    (crate::clock::now_ms() - t0) * 1e3 / loops as f64
}
