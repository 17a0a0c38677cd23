// Needs: weights.wgsl (W, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// F32 weights.
const QK: u32 = 1u;
const BLOCK_BYTES: u32 = 4u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let w = (row >> 2u) + i;
    return Deq8(bitcast<vec4<f32>>(vec4<u32>(W[w], W[w + 1u], W[w + 2u], W[w + 3u])),
                bitcast<vec4<f32>>(vec4<u32>(W[w + 4u], W[w + 5u], W[w + 6u], W[w + 7u])));
}
