// Needs: the header (BIND_IN0), mat_common.wgsl or lora.wgsl (call), the variant's COLS. in_norm.wgsl,
// in_attn.wgsl and in_rows.wgsl define the same functions (all but in_rows.wgsl the *_q8 ones too).
// Matvec and LoRA input stage: the last token's row of x as it is.
@group(0) @binding(BIND_IN0) var<storage, read> x_in: array<vec4<f32>>;

fn input_prepare(lid: u32) {}

fn input_load4(i: u32) -> vec4<f32> {
    return x_in[((call.n - 1u) * COLS + i) / 4u];
}

// For matvec_q8.wgsl (see in_norm.wgsl): the input as it is, a factor of 1.
fn input_prepare_q8(lid: u32) {}

fn input_load4_q8(i: u32, ss: ptr<function, f32>) -> vec4<f32> {
    return input_load4(i);
}

fn input_factor_q8(lid: u32, ss: f32) -> f32 {
    return 1.0;
}
