// Needs: the header (BIND_IN0, BIND_IN1, EPS), mat_common.wgsl or lora.wgsl (call), a reduce_*.wgsl
// (team_sum2), the variant's COLS. in_plain.wgsl, in_attn.wgsl and in_rows.wgsl define the same functions
// (all but in_rows.wgsl the *_q8 ones too).
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

// matvec_q8.wgsl's way, the norm taken from the same loads as the values: its blocks quantize the input
// up to a factor common to all columns (here x * w), then multiply their sums by the factor at the end
// (here the norm, from the squares of x summed as they were loaded). No pass of its own first.
fn input_prepare_q8(lid: u32) {}

fn input_load4_q8(i: u32, ss: ptr<function, f32>) -> vec4<f32> {
    let x = x_in[((call.n - 1u) * COLS + i) / 4u];
    *ss += dot(x, x);
    return x * norm_w[i / 4u];
}

// Every invocation of the workgroup calls it, with its own sum of squares (it has a barrier).
fn input_factor_q8(lid: u32, ss: f32) -> f32 {
    return 1.0 / sqrt(team_sum2(lid, vec2<f32>(ss, 0.0), 256u).x / f32(COLS) + EPS);
}
