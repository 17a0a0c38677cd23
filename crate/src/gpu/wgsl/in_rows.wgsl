// Needs: the header (BIND_IN0), lora.wgsl (in_row), the variant's COLS. in_norm.wgsl, in_plain.wgsl
// and in_attn.wgsl define the same functions.
// LoRA input stage (prefill): token row `in_row` of a buffer of rows, as it is (the normed rows, the
// attention output or the feed-forward's hidden rows: prefill keeps each projection's input).
@group(0) @binding(BIND_IN0) var<storage, read> x_in: array<vec4<f32>>;

fn input_prepare(lid: u32) {}

fn input_load4(i: u32) -> vec4<f32> {
    return x_in[(in_row * COLS + i) / 4u];
}
