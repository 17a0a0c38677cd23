// Matvec input stage: RMSNorm of the last token's row of x, times the norm weight
// (x / sqrt(mean(x^2) + eps) * w, as ggml_rms_norm then ggml_mul).
@group(0) @binding(5) var<storage, read> x_in: array<f32>;
@group(0) @binding(6) var<storage, read> norm_w: array<f32>;

var<workgroup> norm_red: array<f32, 256>;

fn input_prepare(lid: u32) {
    let base = (step.n - 1u) * op.cols;
    var ss = 0.0;
    for (var i = lid; i < op.cols; i += 256u) {
        let v = x_in[base + i];
        ss += v * v;
    }
    norm_red[lid] = ss;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            norm_red[lid] += norm_red[lid + s];
        }
        workgroupBarrier();
    }
}

fn input_load4(i: u32) -> vec4<f32> {
    let scale = 1.0 / sqrt(norm_red[0] / f32(op.cols) + EPS);
    let b = (step.n - 1u) * op.cols + i;
    let x = vec4<f32>(x_in[b], x_in[b + 1u], x_in[b + 2u], x_in[b + 3u]);
    return (x * scale) * vec4<f32>(norm_w[i], norm_w[i + 1u], norm_w[i + 2u], norm_w[i + 3u]);
}
