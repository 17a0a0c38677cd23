// Needs: weights.wgsl (the byte readers, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// Q2_K: 256 values in 84 bytes: 16 scale bytes (one per 16 values: the scale in the low nibble, the min in the
// high one), 64 bytes of 2-bit quants, f16 d, f16 dmin. Per 128-value half: byte l of the half's 32 quant bytes
// holds values l, l + 32, l + 64, l + 96 in its bits 0-1, 2-3, 4-5, 6-7. x = d * scale * q - dmin * min.
const QK: u32 = 256u;
const BLOCK_BYTES: u32 = 84u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 256u) * 84u;
    let j = i % 256u;
    let sm = w_u8(b + j / 16u);
    let d = w_f16(b + 80u) * f32(sm & 0xFu);
    let m = w_f16(b + 82u) * f32(sm >> 4u);
    let q = b + 16u + 32u * (j / 128u) + j % 32u;
    let shift = vec4<u32>(2u * ((j % 128u) / 32u));
    let q0 = (bytes4(w_u32(q)) >> shift) & vec4<u32>(3u);
    let q1 = (bytes4(w_u32(q + 4u)) >> shift) & vec4<u32>(3u);
    return Deq8(d * vec4<f32>(q0) - m, d * vec4<f32>(q1) - m);
}
