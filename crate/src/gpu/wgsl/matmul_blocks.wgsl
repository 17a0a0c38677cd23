// Needs: weights.wgsl and a quant/*.wgsl (dequant8, QK, BLOCK_BYTES), mat_params.wgsl (weight_row),
// matmul_shared.wgsl (op_rows).
// Provides load_row and load_w to matmul.wgsl and matmul_coop.wgsl: a tile's weights decoded from their GGUF blocks
// as the kernel walks the columns (matmul_coop_f16.wgsl reads rows decoded beforehand instead).

// A weight row a loading invocation reads: whether the op has it (a tile's last rows may lie past
// the op's), and where its bytes start.
struct LoadRow {
    valid: bool,
    off: u32,
}

fn load_row(r: u32) -> LoadRow {
    if (r < op_rows()) {
        return LoadRow(true, weight_row(r, op.cols / QK * BLOCK_BYTES));
    }
    return LoadRow(false, 0u);
}

// Eight weights of a row (zeros past the last row and the split's last column: float matrices
// may have a multiple of 16 columns).
fn load_w(valid: bool, row_off: u32, k: u32, k_end: u32) -> Deq8 {
    if (valid && k < k_end) {
        return dequant8(row_off, k);
    }
    return Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
}
