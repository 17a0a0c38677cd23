// Needs: the header (BIND_*, CallParams), `EmbedParams`, declared from its Rust struct (ops/embed.rs),
// weights.wgsl and a quant/*.wgsl (dequant8, QK, BLOCK_BYTES).
// Embedding lookup: x[t] = token_embd[tokens[t]], dequantized from its GGUF blocks, times the op's scale
// (Gemma's sqrt(d_model); 1 elsewhere, which leaves the values as they are). One op per row
// chunk of the table (a table larger than one storage binding is split); ids outside the chunk are
// left to the other ops. One invocation per 8 values.

@group(0) @binding(BIND_PARAMS) var<uniform> ep: EmbedParams;
@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> x: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> tokens: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let g = gid.x * 8u;
    if (t >= call.n || g >= ep.cols) {
        return;
    }
    let id = tokens[t];
    if (id < ep.row0 || id >= ep.row1) {
        return;
    }
    let d = dequant8(ep.offset + (id - ep.row0) * (ep.cols / QK * BLOCK_BYTES), g);
    let b = t * ep.cols + g;
    let scale = bitcast<f32>(ep.scale);
    for (var e = 0u; e < 4u; e++) {
        x[b + e] = d.lo[e] * scale;
        x[b + 4u + e] = d.hi[e] * scale;
    }
}
