// Matvec input stage of the fused decode path: RMSNorm (times the norm weight) of the residual
// stream after attention, the last token's row of x plus the attention block's output
// (attn_heads.wgsl). The sum is kept in workgroup memory (D_MODEL at most 1024); matvec_down
// stores it into x later (bias_attn.wgsl).
@group(0) @binding(5) var<storage, read> x_in: array<f32>;
@group(0) @binding(6) var<storage, read> norm_w: array<f32>;

var<workgroup> x_attn: array<f32, D_MODEL>;
var<workgroup> norm_red: array<f32, 256>;

fn input_prepare(lid: u32) {
    let base = (step.n - 1u) * D_MODEL;
    var ss = 0.0;
    for (var p = 0u; p < (D_MODEL + 255u) / 256u; p++) {
        let i = p * 256u + lid;
        if (i < D_MODEL) {
            let v = x_in[base + i] + attn_out(i);
            x_attn[i] = v;
            ss += v * v;
        }
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
    let scale = 1.0 / sqrt(norm_red[0] / f32(D_MODEL) + EPS);
    let x = vec4<f32>(x_attn[i], x_attn[i + 1u], x_attn[i + 2u], x_attn[i + 3u]);
    return (x * scale) * vec4<f32>(norm_w[i], norm_w[i + 1u], norm_w[i + 2u], norm_w[i + 3u]);
}
