// Needs: the header (BIND_IN0, OUT_*, RESIDUAL_SCALE), mat_common.wgsl (op, call, out), bias.wgsl or no_bias.wgsl,
// the variant's OUT_MODE.
// The sum of a split matmul's partial products ([split][token][row], rows packed; matmul.wgsl
// OUT_PARTIAL), stored or added to the output like an unsplit matmul (OUT_STORE or OUT_ADD), with
// the bias. One invocation per output value.

@group(0) @binding(BIND_IN0) var<storage, read> part: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let r = gid.x;
    let n = call.n;
    let n_rows = op.seg_end[op.n_segs - 1u];
    if (t >= n || r >= n_rows) {
        return;
    }
    var v = 0.0;
    for (var z = 0u; z < op.splits; z++) {
        v += part[(z * n + t) * n_rows + r];
    }
    let o = t * op.out_stride + op.out_col0 + r;
    if (OUT_MODE == OUT_STORE) {
        out[o] = v + bias(r);
    } else {
        out[o] += RESIDUAL_SCALE * (v + bias(r));
    }
}
