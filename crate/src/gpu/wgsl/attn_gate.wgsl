// Needs: the header (BIND_*, CallParams, Q_DIM).
// Qwen3.5's gated attention (prefill): each value of the call's attention output rows ([n x Q_DIM]) times the
// sigmoid of its gate (the query projection's second half per head, split out at upload: gpu/model.rs). Decode
// gates in the output matvec's input stage instead (attn_gated.wgsl). One invocation per value, by tokens.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> att: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> gate: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let i = wg.x * 256u + lid;
    if (i >= Q_DIM || wg.y >= call.n) {
        return;
    }
    let at = wg.y * Q_DIM + i;
    att[at] *= 1.0 / (1.0 + exp(-gate[at]));
}
