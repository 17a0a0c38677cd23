// Needs: weights.wgsl (the byte readers, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// Q5_1: 32 values in 24 bytes: f16 d, f16 m, 32 high bits, 16 bytes of low nibbles.
// x = q * d + m with q = nibble | high bit << 4.
const QK: u32 = 32u;
const BLOCK_BYTES: u32 = 24u;

fn high4(qh: u32, j: u32) -> vec4<u32> {
    return ((vec4<u32>(qh) >> (vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(j))) & vec4<u32>(1u)) << vec4<u32>(4u);
}

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 32u) * 24u;
    let j = i % 32u;
    let dm = unpack2x16float(w_u32(b));
    let qh = w_u32(b + 4u);
    let q = b + 8u + (j % 16u);
    let shift = (j / 16u) * 4u;
    return Deq8(vec4<f32>(nibbles4(w_u32(q), shift) | high4(qh, j)) * dm.x + dm.y,
                vec4<f32>(nibbles4(w_u32(q + 4u), shift) | high4(qh, j + 4u)) * dm.x + dm.y);
}
