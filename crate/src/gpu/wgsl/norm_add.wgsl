// Needs: the header (BIND_*, CallParams, D_MODEL), `ScaleParams`, declared from its Rust struct (ops/norm.rs),
// row_rms.wgsl (row_rms_scale), the variant's SPLITS.
// Gemma's post-norm of a block's output, added to the residual stream: x += y / sqrt(mean(y^2) + eps) * w
// for each token row (decode and prefill), y the block's output rows, or the sum of the SPLITS partial
// products of its split matmul ([split][token][D_MODEL], matmul.wgsl OUT_PARTIAL, summed in
// split_reduce.wgsl's order: the split's reduce folded in). One workgroup per row. Then x *= the op's scale: Gemma 4's
// layer output scale after the layer's last block, 1 elsewhere (which changes no value).

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> x: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> y_in: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> norm_w: array<f32>;
@group(0) @binding(BIND_PARAMS) var<uniform> sp: ScaleParams;

// Value i of row t of y.
fn y_at(t: u32, i: u32) -> f32 {
    var v = 0.0;
    for (var z = 0u; z < SPLITS; z++) {
        v += y_in[(z * call.n + t) * D_MODEL + i];
    }
    return v;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.x;
    var ss = 0.0;
    for (var i = lid; i < D_MODEL; i += 256u) {
        let v = y_at(t, i);
        ss += v * v;
    }
    let scale = row_rms_scale(lid, ss);
    let then = bitcast<f32>(sp.scale);
    for (var i = lid; i < D_MODEL; i += 256u) {
        let at = t * D_MODEL + i;
        x[at] = (x[at] + (y_at(t, i) * scale) * norm_w[i]) * then;
    }
}
