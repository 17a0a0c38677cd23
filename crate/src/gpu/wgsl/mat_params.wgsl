// Needs: the header (BIND_PARAMS) and `MatParams`, declared from its Rust struct (ops/mat.rs).
// The matrix ops' parameters and where an output row's weights start: shared by the matrix kernels
// (through mat_common.wgsl) and by dequant_f16.wgsl.

@group(0) @binding(BIND_PARAMS) var<uniform> op: MatParams;

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
