// Needs: nothing. Provides: output_gate4, for in_attn.wgsl.
// The merged attention output as it is (every model but Qwen3.5: attn_gated.wgsl).
fn output_gate4(i: u32, x: vec4<f32>) -> vec4<f32> {
    return x;
}
