// Needs: the header (BIND_IN0, BIND_IN1, EPS), mat_common.wgsl or lora.wgsl (call), a reduce_*.wgsl
// (team_sum2), the variant's COLS. in_plain.wgsl, in_attn.wgsl and in_rows.wgsl define the same functions.
// Matvec and LoRA input stage: RMSNorm of the last token's row of x, times the norm weight
// (x / sqrt(mean(x^2) + eps) * w, as ggml_rms_norm then ggml_mul).
@group(0) @binding(BIND_IN0) var<storage, read> x_in: array<vec4<f32>>;
@group(0) @binding(BIND_IN1) var<storage, read> norm_w: array<vec4<f32>>;

var<private> norm_scale: f32;

fn input_prepare(lid: u32) {
    let base = (call.n - 1u) * (COLS / 4u);
    var ss = 0.0;
    for (var k = 0u; k < (COLS / 4u + 255u) / 256u; k++) {
        let i = lid + 256u * k;
        if (i < COLS / 4u) {
            let v = x_in[base + i];
            ss += dot(v, v);
        }
    }
    norm_scale = 1.0 / sqrt(team_sum2(lid, vec2<f32>(ss, 0.0), 256u).x / f32(COLS) + EPS);
}

fn input_load4(i: u32) -> vec4<f32> {
    let x = x_in[((call.n - 1u) * COLS + i) / 4u];
    return (x * norm_scale) * norm_w[i / 4u];
}
