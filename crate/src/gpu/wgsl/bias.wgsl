// Needs: the header (BIND_AUX), mat_common.wgsl (op). no_bias.wgsl defines the same function.
// Per-output-row bias (qwen2's q/k/v biases), indexed like the op's output columns.
@group(0) @binding(BIND_AUX) var<storage, read> bias_v: array<f32>;

fn bias(r: u32) -> f32 {
    return bias_v[op.out_col0 + r];
}
