// Needs: weights.wgsl (the byte readers, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// BF16 weights: the high half of an f32.
const QK: u32 = 1u;
const BLOCK_BYTES: u32 = 2u;

fn bf16x2(w: u32) -> vec2<f32> {
    return bitcast<vec2<f32>>(vec2<u32>(w << 16u, w & 0xFFFF0000u));
}

fn dequant8(row: u32, i: u32) -> Deq8 {
    let w = (row >> 2u) + (i >> 1u);
    return Deq8(vec4<f32>(bf16x2(W[w]), bf16x2(W[w + 1u])), vec4<f32>(bf16x2(W[w + 2u]), bf16x2(W[w + 3u])));
}
