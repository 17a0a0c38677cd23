// Needs: the header (BIND_*, D_MODEL), row_rms.wgsl (row_rms_scale).
// RMSNorm of each token row (prefill): out = x / sqrt(mean(x^2) + eps) * w. One workgroup per row.

@group(0) @binding(BIND_OUT) var<storage, read_write> out: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> x_in: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> norm_w: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let base = wg.x * D_MODEL;
    var ss = 0.0;
    for (var i = lid; i < D_MODEL; i += 256u) {
        let v = x_in[base + i];
        ss += v * v;
    }
    let scale = row_rms_scale(lid, ss);
    for (var i = lid; i < D_MODEL; i += 256u) {
        out[base + i] = (x_in[base + i] * scale) * norm_w[i];
    }
}
