// Needs: weights.wgsl (the byte readers, Deq8), iq4_values.wgsl (iq4_values4). Provides QK, BLOCK_BYTES and dequant8.
// IQ4_XS: 256 values in 136 bytes: f16 d, u16 scales_h (2 high bits per sub-block of 32), 4 bytes
// scales_l (4 low bits per sub-block: even ones in the low nibble), then 16 bytes per sub-block with
// its nibbles as IQ4_NL's. x = d * (ls - 32) * IQ4_VALUES[q], ls the 6-bit scale.
const QK: u32 = 256u;
const BLOCK_BYTES: u32 = 136u;

fn dequant8(row: u32, i: u32) -> Deq8 {
    let b = row + (i / 256u) * 136u; // 4-aligned: rows are, and 136 is a multiple of 4
    let j = i % 256u;
    let ib = j / 32u;
    let head = W[b >> 2u]; // d, scales_h
    let ls = ((w_u8(b + 4u + ib / 2u) >> (4u * (ib % 2u))) & 0xFu) | (((head >> (16u + 2u * ib)) & 3u) << 4u);
    let dl = unpack2x16float(head).x * (f32(ls) - 32.0);
    let q = b + 8u + 16u * ib + (j % 16u);
    let shift = ((j / 16u) % 2u) * 4u;
    return Deq8(dl * iq4_values4(nibbles4(w_u32(q), shift)),
                dl * iq4_values4(nibbles4(w_u32(q + 4u), shift)));
}
