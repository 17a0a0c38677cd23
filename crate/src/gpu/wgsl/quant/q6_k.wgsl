// Needs: weights.wgsl (the byte readers, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// Q6_K: 256 values in 210 bytes: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 signed
// scales (one per 16 values), f16 d. Per 128-value half: byte l of the first 32 low-nibble bytes
// holds values l (low nibble) and l + 64 (high); of the next 32, values l + 32 and l + 96; high
// byte l holds the top bits of values l, l + 32, l + 64, l + 96, lowest first. x = d * sc * (q - 32).
const QK: u32 = 256u;
const BLOCK_BYTES: u32 = 210u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 256u) * 210u;
    let j = i % 256u;
    let half = j / 128u;
    let g = (j % 128u) / 32u;
    let l = j % 32u;
    let d = w_f16(b + 208u) * sbytes4(w_u32(b + 192u + (j / 16u) - (j / 16u) % 2u))[(j / 16u) % 2u];
    let ql = b + 64u * half + 32u * (g % 2u) + l;
    let qh = b + 128u + 32u * half + l;
    let shift = (g / 2u) * 4u;
    let q0 = nibbles4(w_u32(ql), shift) | (((bytes4(w_u32(qh)) >> vec4<u32>(2u * g)) & vec4<u32>(3u)) << vec4<u32>(4u));
    let q1 = nibbles4(w_u32(ql + 4u), shift) | (((bytes4(w_u32(qh + 4u)) >> vec4<u32>(2u * g)) & vec4<u32>(3u)) << vec4<u32>(4u));
    return Deq8(d * (vec4<f32>(q0) - 32.0), d * (vec4<f32>(q1) - 32.0));
}
