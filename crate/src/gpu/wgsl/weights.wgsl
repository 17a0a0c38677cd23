// Needs: the header (BIND_WEIGHTS). Provides W, the byte readers and Deq8 to a quant/*.wgsl.
// Weights: one arena of GGUF tensor bytes, viewed as u32 words. GGUF blocks are byte-packed
// (Q4_0 is 18 bytes, Q6_K 210), so the readers below take byte offsets and extract what they need.
// Every block starts at an even byte offset (all block sizes are even and rows start 4-aligned).

@group(0) @binding(BIND_WEIGHTS) var<storage, read> W: array<u32>;

// 16 bits at an even byte offset.
fn w_u16(b: u32) -> u32 {
    return (W[b >> 2u] >> ((b & 2u) * 8u)) & 0xFFFFu;
}

fn w_f16(b: u32) -> f32 {
    return unpack2x16float(w_u16(b)).x;
}

// 4 bytes starting at an even byte offset (may straddle two words).
fn w_u32(b: u32) -> u32 {
    let i = b >> 2u;
    if ((b & 2u) == 0u) {
        return W[i];
    }
    return (W[i] >> 16u) | (W[i + 1u] << 16u);
}

fn w_u8(b: u32) -> u32 {
    return (W[b >> 2u] >> ((b & 3u) * 8u)) & 0xFFu;
}

// A byte as a signed (i8) value.
fn sbyte(b: u32) -> i32 {
    return (bitcast<i32>(w_u8(b)) << 24u) >> 24u;
}

// The four bytes of a word as unsigned values, lowest first.
fn bytes4(q: u32) -> vec4<u32> {
    return (vec4<u32>(q) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu);
}

// The four bytes of a word as signed (i8) values, lowest first.
fn sbytes4(q: u32) -> vec4<f32> {
    return vec4<f32>((vec4<i32>(bitcast<i32>(q)) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// Low (shift 0) or high (shift 4) nibbles of the four bytes of a word.
fn nibbles4(q: u32, shift: u32) -> vec4<u32> {
    return (vec4<u32>(q) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(shift))) & vec4<u32>(0xFu);
}

// Eight consecutive weights of a row.
struct Deq8 {
    lo: vec4<f32>,
    hi: vec4<f32>,
}
