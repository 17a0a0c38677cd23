// Needs: weights.wgsl (the byte readers, Deq8). Provides QK, BLOCK_BYTES and dequant8.
// Q8_0: 32 values in 34 bytes: f16 d, 32 signed bytes. x = q * d.
const QK: u32 = 32u;
const BLOCK_BYTES: u32 = 34u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 32u) * 34u;
    let d = w_f16(b);
    let q = b + 2u + (i % 32u);
    return Deq8(sbytes4(w_u32(q)) * d, sbytes4(w_u32(q + 4u)) * d);
}
