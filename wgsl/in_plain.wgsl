// Needs: the header (BIND_IN0), mat_common.wgsl or lora.wgsl (call), the variant's COLS. in_norm.wgsl,
// in_attn.wgsl and in_rows.wgsl define the same functions.
// Matvec and LoRA input stage: the last token's row of x as it is.
@group(0) @binding(BIND_IN0) var<storage, read> x_in: array<vec4<f32>>;

fn input_prepare(lid: u32) {}

fn input_load4(i: u32) -> vec4<f32> {
    return x_in[((call.n - 1u) * COLS + i) / 4u];
}
