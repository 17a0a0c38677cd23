// Needs: weights.wgsl (the byte readers, Deq8), k_scales.wgsl (scale_min_k4). Provides QK, BLOCK_BYTES and dequant8.
// Q5_K: 256 values in 176 bytes: f16 d, f16 dmin, 12 bytes of packed scales and mins, 32 bytes of
// high bits (bit s of byte l is the fifth bit of value 32s + l), 128 bytes of nibbles laid out as
// in Q4_K. x = d * sc * q - dmin * m.
const QK: u32 = 256u;
const BLOCK_BYTES: u32 = 176u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 256u) * 176u;
    let j = i % 256u;
    let sub = j / 32u;
    let dm = unpack2x16float(W[b >> 2u]);
    let sm = scale_min_k4(b + 4u, sub);
    let d = dm.x * sm.x;
    let m = dm.y * sm.y;
    let h = b + 16u + (j % 32u);
    let q = b + 48u + 32u * (j / 64u) + (j % 32u);
    let shift = (sub % 2u) * 4u;
    let h0 = ((bytes4(W[h >> 2u]) >> vec4<u32>(sub)) & vec4<u32>(1u)) << vec4<u32>(4u);
    let h1 = ((bytes4(W[(h >> 2u) + 1u]) >> vec4<u32>(sub)) & vec4<u32>(1u)) << vec4<u32>(4u);
    return Deq8(d * vec4<f32>(nibbles4(W[q >> 2u], shift) | h0) - m,
                d * vec4<f32>(nibbles4(W[(q >> 2u) + 1u], shift) | h1) - m);
}
