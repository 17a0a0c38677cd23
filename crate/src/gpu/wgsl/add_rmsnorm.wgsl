// Needs: the header (BIND_*, CallParams, D_MODEL, RESIDUAL_SCALE), row_rms.wgsl (row_rms_scale), the variant's SPLITS.
// A split matmul's residual add folded into the RMSNorm after it (prefill): x += RESIDUAL_SCALE * the sum of the
// SPLITS partial products ([split][token][D_MODEL], matmul.wgsl OUT_PARTIAL, summed in
// split_reduce.wgsl's order), then out = x / sqrt(mean(x^2) + eps) * w. One workgroup per row:
// one dispatch instead of a reduce and a norm.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> out: array<f32>;
@group(0) @binding(BIND_AUX) var<storage, read_write> x: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> part: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> norm_w: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let base = wg.x * D_MODEL;
    var ss = 0.0;
    for (var i = lid; i < D_MODEL; i += 256u) {
        var v = 0.0;
        for (var z = 0u; z < SPLITS; z++) {
            v += part[(z * call.n + wg.x) * D_MODEL + i];
        }
        let r = x[base + i] + RESIDUAL_SCALE * v;
        x[base + i] = r;
        ss += r * r;
    }
    let scale = row_rms_scale(lid, ss);
    for (var i = lid; i < D_MODEL; i += 256u) {
        out[base + i] = (x[base + i] * scale) * norm_w[i];
    }
}
