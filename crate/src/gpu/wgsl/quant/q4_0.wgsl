// Needs: weights.wgsl (the byte readers, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// Q4_0: 32 values in 18 bytes: f16 d, then 16 bytes whose low nibbles are values 0..16 and high
// nibbles values 16..32. x = (q - 8) * d.
const QK: u32 = 32u;
const BLOCK_BYTES: u32 = 18u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 32u) * 18u;
    let j = i % 32u;
    let d = w_f16(b);
    let q = b + 2u + (j % 16u);
    let shift = (j / 16u) * 4u;
    return Deq8((vec4<f32>(nibbles4(w_u32(q), shift)) - 8.0) * d,
                (vec4<f32>(nibbles4(w_u32(q + 4u), shift)) - 8.0) * d);
}
