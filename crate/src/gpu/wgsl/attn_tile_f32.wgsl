// Needs: the header (BK), attn_prefill_parts.wgsl (HD4). Provides put_chunk, key_at, value_at.
// attn_prefill.wgsl's tile of keys and values in workgroup memory as f32 chunks (2 * BK * HD4 * 16 bytes):
// unpacked once, where the tile is loaded. attn_tile_f16.wgsl keeps a wider head's tile as f16 pairs instead.

var<workgroup> ks: array<vec4<f32>, BK * HD4>;
var<workgroup> vs: array<vec4<f32>, BK * HD4>;

// Chunk i of the tile from fetch_chunk's f16 pairs (key: xy, value: zw).
fn put_chunk(i: u32, c: vec4<u32>) {
    if (i < BK * HD4) {
        ks[i] = vec4<f32>(unpack2x16float(c.x), unpack2x16float(c.y));
        vs[i] = vec4<f32>(unpack2x16float(c.z), unpack2x16float(c.w));
    }
}

fn key_at(e: u32) -> vec4<f32> {
    return ks[e];
}

fn value_at(e: u32) -> vec4<f32> {
    return vs[e];
}
