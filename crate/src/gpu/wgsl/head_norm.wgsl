// Needs: the header (BIND_*, CallParams, N_HEADS, N_KV_HEADS, HEAD_DIM, Q_DIM, KV_DIM, EPS), a reduce_*.wgsl
// (team_sum2), the variant's HEADS.
// Qwen3's QK-norm, in place in the qkv rows ([q | k | v] per token), before RoPE: each of the first HEADS heads of a
// row (the query heads; then the key heads; then Gemma 4's value heads) becomes x / sqrt(mean(x^2) + eps) * w, with
// w the layer's q_norm for query heads, its k_norm for key heads, its v_norm for value heads (`qk_norm` holds
// [q_norm | k_norm | v_norm], HEAD_DIM each, as far as HEADS reaches). A team of 64 invocations per head, four heads
// a workgroup, by tokens.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> qk_norm: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let head = wg.x * 4u + lid / 64u;
    let lane = lid % 64u;
    let live = head < HEADS && wg.y < call.n;
    // The key heads follow the query heads in a row, the value heads the key heads, so head h starts at h * HEAD_DIM
    // whichever it is.
    let base = wg.y * (Q_DIM + 2u * KV_DIM) + head * HEAD_DIM;
    let w = select(0u, HEAD_DIM, head >= N_HEADS) + select(0u, HEAD_DIM, head >= N_HEADS + N_KV_HEADS);
    var ss = 0.0;
    if (live) {
        for (var i = lane; i < HEAD_DIM; i += 64u) {
            let v = qkv[base + i];
            ss += v * v;
        }
    }
    let scale = 1.0 / sqrt(team_sum2(lid, vec2<f32>(ss, 0.0), 64u).x / f32(HEAD_DIM) + EPS);
    if (live) {
        for (var i = lane; i < HEAD_DIM; i += 64u) {
            qkv[base + i] = (qkv[base + i] * scale) * qk_norm[w + i];
        }
    }
}
