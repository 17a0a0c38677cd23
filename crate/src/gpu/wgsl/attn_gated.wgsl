// Needs: the header (BIND_IN1). Provides: output_gate4, for in_attn.wgsl.
// Qwen3.5's gated attention in decode: the merged attention output times the sigmoid of the last token's gate
// (`attn_gate`, [Q_DIM]: the query projection's second half per head). attn_ungated.wgsl defines the same function.
@group(0) @binding(BIND_IN1) var<storage, read> attn_gate: array<vec4<f32>>;

fn output_gate4(i: u32, x: vec4<f32>) -> vec4<f32> {
    return x / (1.0 + exp(-attn_gate[i / 4u]));
}
