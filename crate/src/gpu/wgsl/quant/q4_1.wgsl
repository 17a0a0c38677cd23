// Needs: weights.wgsl (the byte readers, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// Q4_1: 32 values in 20 bytes: f16 d, f16 m, 16 bytes of nibbles (low: values 0..16, high: 16..32).
// x = q * d + m.
const QK: u32 = 32u;
const BLOCK_BYTES: u32 = 20u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 32u) * 20u;
    let j = i % 32u;
    let dm = unpack2x16float(w_u32(b));
    let q = b + 4u + (j % 16u);
    let shift = (j / 16u) * 4u;
    return Deq8(vec4<f32>(nibbles4(w_u32(q), shift)) * dm.x + dm.y,
                vec4<f32>(nibbles4(w_u32(q + 4u), shift)) * dm.x + dm.y);
}
