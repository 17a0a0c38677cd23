// Needs: weights.wgsl (the byte readers, Deq8), iq4_values.wgsl (iq4_values4). Provides QK, BLOCK_BYTES and dequant8.
// IQ4_NL: 32 values in 18 bytes: f16 d, then 16 bytes whose low nibbles are values 0..16 and high
// nibbles values 16..32. x = d * IQ4_VALUES[q].
const QK: u32 = 32u;
const BLOCK_BYTES: u32 = 18u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 32u) * 18u;
    let j = i % 32u;
    let d = w_f16(b);
    let q = b + 2u + (j % 16u);
    let shift = (j / 16u) * 4u;
    return Deq8(d * iq4_values4(nibbles4(w_u32(q), shift)),
                d * iq4_values4(nibbles4(w_u32(q + 4u), shift)));
}
