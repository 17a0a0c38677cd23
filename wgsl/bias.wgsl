// Per-output-row bias (qwen2's q/k/v biases), indexed like the op's output columns.
@group(0) @binding(4) var<storage, read> bias_v: array<f32>;

fn bias(r: u32) -> f32 {
    return bias_v[op.out_col0 + r];
}
