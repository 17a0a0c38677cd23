// Needs: the header (BK), attn_prefill_parts.wgsl (HD4). Provides put_chunk, key_at, value_at.
// attn_prefill.wgsl's tile of keys and values in workgroup memory as the cache's f16 pairs (2 * BK * HD4 * 8 bytes),
// unpacked where they are read: for heads too wide for four keys and values of f32 chunks in 12 KiB (Gemma 4's
// global heads of 512). attn_tile_f32.wgsl defines the same functions.

var<workgroup> ks: array<vec2<u32>, BK * HD4>;
var<workgroup> vs: array<vec2<u32>, BK * HD4>;

// Chunk i of the tile from fetch_chunk's f16 pairs (key: xy, value: zw).
fn put_chunk(i: u32, c: vec4<u32>) {
    if (i < BK * HD4) {
        ks[i] = c.xy;
        vs[i] = c.zw;
    }
}

fn key_at(e: u32) -> vec4<f32> {
    let w = ks[e];
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}

fn value_at(e: u32) -> vec4<f32> {
    let w = vs[e];
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}
