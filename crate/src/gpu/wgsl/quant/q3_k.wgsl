// Needs: weights.wgsl (the byte readers, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// Q3_K: 256 values in 110 bytes: 32 bytes of high bits (hmask), 64 bytes of 2-bit low bits, 12 bytes of packed 6-bit
// scales (one per 16 values, stored + 32), f16 d. Value j's low bits lie as Q2_K's quants do (byte
// 32 * (j / 128) + j % 32, bits 2 * ((j % 128) / 32)); its high bit is bit j / 32 of hmask byte j % 32, and a clear
// high bit takes 4 off: q = low - 4 * (1 - high), in -4..3. x = d * (scale - 32) * q.
const QK: u32 = 256u;
const BLOCK_BYTES: u32 = 110u;

// Sub-block s's scale (0..16) from the 12 packed bytes at byte `p`, less 32 (ggml's Q3_K unpacking): its low four
// bits are nibble s / 8 of byte s % 8, its top two bits are bits 2 * (s / 4) of byte 8 + s % 4.
fn scale_k3(p: u32, s: u32) -> f32 {
    let lo = (w_u8(p + s % 8u) >> (4u * (s / 8u))) & 0xFu;
    let hi = (w_u8(p + 8u + s % 4u) >> (2u * (s / 4u))) & 3u;
    return f32(lo | (hi << 4u)) - 32.0;
}

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 256u) * 110u;
    let j = i % 256u;
    let d = w_f16(b + 108u) * scale_k3(b + 96u, j / 16u);
    let q = b + 32u + 32u * (j / 128u) + j % 32u;
    let h = b + j % 32u;
    let shift = vec4<u32>(2u * ((j % 128u) / 32u));
    let bit = vec4<u32>(j / 32u);
    let q0 = vec4<f32>((bytes4(w_u32(q)) >> shift) & vec4<u32>(3u)) - 4.0 * vec4<f32>(~(bytes4(w_u32(h)) >> bit) & vec4<u32>(1u));
    let q1 = vec4<f32>((bytes4(w_u32(q + 4u)) >> shift) & vec4<u32>(3u)) - 4.0 * vec4<f32>(~(bytes4(w_u32(h + 4u)) >> bit) & vec4<u32>(1u));
    return Deq8(d * q0, d * q1);
}
