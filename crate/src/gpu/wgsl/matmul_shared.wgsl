// Needs: the header (BIND_IN0, OUT_*, RESIDUAL_SCALE), weights.wgsl and a quant/*.wgsl (dequant8, Deq8, QK,
// BLOCK_BYTES), mat_common.wgsl (op, out, weight_row), bias.wgsl or no_bias.wgsl, the variant's
// OUT_MODE.
// Provides x_in, op_rows, load_row, load_w, load_x and store to the prefill kernels, matmul.wgsl
// and matmul_coop.wgsl: what they read and write is the same; they differ in how a tile is
// multiplied.
//
// OUT_MODE: OUT_STORE, OUT_ADD (to the residual, times RESIDUAL_SCALE), OUT_PARTIAL: the workgroup's columns are split z of
// op.k_len each, and it stores its partial product at [z][token][row] (rows packed) for
// split_reduce.wgsl to sum. A short prompt has few tiles, each a long serial walk over the
// columns: splitting the columns puts more workgroups to work.

// Token rows of op.cols values (a multiple of 8, as every matrix's column count is), read 4 at a time.
@group(0) @binding(BIND_IN0) var<storage, read> x_in: array<vec4<f32>>;

// The op's output rows (all its segments').
fn op_rows() -> u32 {
    return op.seg_end[op.n_segs - 1u];
}

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

// Eight values of a token row (zeros past the last token and the split's last column).
fn load_x(valid: bool, t: u32, k: u32, k_end: u32) -> Deq8 {
    if (valid && k < k_end) {
        let b = (t * op.cols + k) / 4u;
        return Deq8(x_in[b], x_in[b + 1u]);
    }
    return Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
}

// Token t's results for rows r0 .. r0 + 4 (those below n_rows), by OUT_MODE; nothing past the
// call's n tokens. wg_z: the workgroup's column split.
fn store(t: u32, r0: u32, n: u32, n_rows: u32, wg_z: u32, acc: vec4<f32>) {
    if (t >= n) {
        return;
    }
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + i;
        if (r < n_rows) {
            let o = t * op.out_stride + op.out_col0 + r;
            if (OUT_MODE == OUT_PARTIAL) {
                out[(wg_z * n + t) * n_rows + r] = acc[i];
            } else if (OUT_MODE == OUT_STORE) {
                out[o] = acc[i] + bias(r);
            } else {
                out[o] += RESIDUAL_SCALE * (acc[i] + bias(r));
            }
        }
    }
}
