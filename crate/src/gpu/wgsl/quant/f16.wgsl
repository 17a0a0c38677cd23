// Needs: weights.wgsl (W, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// F16 weights (rows start 4-aligned: the column count is a multiple of 32).
const QK: u32 = 1u;
const BLOCK_BYTES: u32 = 2u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let w = (row >> 2u) + (i >> 1u);
    return Deq8(vec4<f32>(unpack2x16float(W[w]), unpack2x16float(W[w + 1u])),
                vec4<f32>(unpack2x16float(W[w + 2u]), unpack2x16float(W[w + 3u])));
}
