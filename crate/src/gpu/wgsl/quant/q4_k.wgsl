// Needs: weights.wgsl (the byte readers, Deq8), k_scales.wgsl (scale_min_k4). Provides QK, BLOCK_BYTES and dequant8.
// Q4_K: 256 values in 144 bytes: f16 d, f16 dmin, 12 bytes of packed 6-bit scales and mins
// (one pair per 32 values), 128 bytes of nibbles: byte l of the g-th 32-byte group holds values
// 64g + l (low nibble) and 64g + 32 + l (high). x = d * sc * q - dmin * m.
const QK: u32 = 256u;
const BLOCK_BYTES: u32 = 144u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 256u) * 144u;
    let j = i % 256u;
    let dm = unpack2x16float(W[b >> 2u]);
    let sm = scale_min_k4(b + 4u, j / 32u);
    let d = dm.x * sm.x;
    let m = dm.y * sm.y;
    let q = b + 16u + 32u * (j / 64u) + (j % 32u);
    let shift = ((j / 32u) % 2u) * 4u;
    return Deq8(d * vec4<f32>(nibbles4(W[q >> 2u], shift)) - m,
                d * vec4<f32>(nibbles4(W[(q >> 2u) + 1u], shift)) - m);
}
