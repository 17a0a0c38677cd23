// Matvec input stage: the last token's row of x as it is.
@group(0) @binding(5) var<storage, read> x_in: array<f32>;

fn input_prepare(lid: u32) {}

fn input_load4(i: u32) -> vec4<f32> {
    let b = (step.n - 1u) * op.cols + i;
    return vec4<f32>(x_in[b], x_in[b + 1u], x_in[b + 2u], x_in[b + 3u]);
}
