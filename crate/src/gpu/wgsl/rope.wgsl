// Needs: the header (BIND_IN0, BIND_IN1, Q_DIM, KV_DIM, ROPE_DIMS, NEOX) and, from the file that
// includes it, `qkv_at(i)`: the qkv value at index i (token row * QKV + column).
// Provides: the qkv rows binding `qkv`, their width QKV, and `rotated`.
// RoPE of one value of a head in the qkv rows ([q (Q_DIM) | k (KV_DIM) | v (KV_DIM)] per token),
// as ggml applies it: pairs (2i, 2i+1), or (i, i + ROPE_DIMS/2) for NeoX, rotated by the angle of
// pair i at the position. The cos/sin table is computed on the CPU exactly as ggml does
// (theta = pos * base^(-2i/rope_dims), iterated in f32). Shared by rope_store.wgsl and
// attn_decode.wgsl.

@group(0) @binding(BIND_IN0) var<storage, read> qkv: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> rope: array<vec2<f32>>; // [pos][ROPE_DIMS / 2] (cos, sin)

const QKV: u32 = Q_DIM + 2u * KV_DIM;
const ROPE_PAIRS: u32 = ROPE_DIMS / 2u;

// Element e of the head whose values start at qkv[base], rotated for position pos.
fn rotated(base: u32, e: u32, pos: u32) -> f32 {
    if (e >= ROPE_DIMS) {
        return qkv_at(base + e);
    }
    var i: u32;
    var a: u32;
    var second: bool;
    if (NEOX) {
        i = e % ROPE_PAIRS;
        a = i;
        second = e >= ROPE_PAIRS;
    } else {
        i = e / 2u;
        a = 2u * i;
        second = (e % 2u) == 1u;
    }
    let b = select(a + 1u, a + ROPE_PAIRS, NEOX);
    let cs = rope[pos * ROPE_PAIRS + i];
    let x0 = qkv_at(base + a);
    let x1 = qkv_at(base + b);
    if (second) {
        return x0 * cs.y + x1 * cs.x;
    }
    return x0 * cs.x - x1 * cs.y;
}
