// Needs: the header (BIND_OUT), weights.wgsl and a quant/*.wgsl (dequant8, QK, BLOCK_BYTES), mat_params.wgsl (op,
// weight_row).
// A prefill matmul's weights as f16 before the product (ops/dequant.rs): the op's rows, all its segments', row r's
// values at [r * op.cols ..], the layout of an F16 matrix, which the matmul kernels then read with one 16-byte load
// per eight values instead of decoding blocks in their loops. Values are saturated at f16's largest, as
// matmul_coop.wgsl's `half` does: on cooperative matrices the product is the same either way.
// One invocation per eight values, one 16-byte store each; workgroups folded into two dimensions past 65535.

@group(0) @binding(BIND_OUT) var<storage, read_write> halves: array<vec4<u32>>;

fn pack_half4(v: vec4<f32>) -> vec2<u32> {
    let c = clamp(v, vec4<f32>(-65504.0), vec4<f32>(65504.0));
    return vec2<u32>(pack2x16float(c.xy), pack2x16float(c.zw));
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let per_row = op.cols / 8u;
    let r = i / per_row;
    if (r >= op.seg_end[op.n_segs - 1u]) {
        return;
    }
    let v = dequant8(weight_row(r, op.cols / QK * BLOCK_BYTES), (i % per_row) * 8u);
    halves[i] = vec4<u32>(pack_half4(v.lo), pack_half4(v.hi));
}
