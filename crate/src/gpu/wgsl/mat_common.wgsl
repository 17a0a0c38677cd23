// Needs: the header (BIND_*, CallParams) and `MatParams`, declared from its Rust struct (ops/mat.rs).
// Declarations shared by matvec.wgsl, matmul.wgsl and split_reduce.wgsl: the op's parameters,
// the call's parameters, the output, and where an output row's weights start.

@group(0) @binding(BIND_PARAMS) var<uniform> op: MatParams;
@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> out: array<f32>;

// Byte offset of the weights of output row r (r < total rows).
fn weight_row(r: u32, row_bytes: u32) -> u32 {
    var s = 0u;
    var start = 0u;
    for (var i = 1u; i < op.n_segs; i++) {
        if (r >= op.seg_end[i - 1u]) {
            s = i;
            start = op.seg_end[i - 1u];
        }
    }
    return op.seg_off[s] + (r - start) * row_bytes;
}

