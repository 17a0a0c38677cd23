// Needs: the header (BIND_*, CallParams, Q_DIM, HEAD_DIM, N_HEADS), common.wgsl (NEG_BIG),
// attn_prefill_parts.wgsl (HD4, part_record, part_stats), the variant's MAX_SPLITS.
// The merge of prefill attention's partials where it split the keys among call.n_splits (at most
// MAX_SPLITS) workgroups (attn_prefill.wgsl writes them): per token and head, the splits' unnormalized
// outputs and sums are weighed by exp(their max - the largest max), and the sum of outputs is divided
// by the sum of sums. An invocation per four dimensions of a token's output: workgroups of 64 along x,
// a token per workgroup row along y.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> att: array<vec4<f32>>;
@group(0) @binding(BIND_IN0) var<storage, read> parts: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let t = gid.y;
    if (i >= Q_DIM / 4u) {
        return;
    }
    let h = i / HD4;
    // Online over the splits, in straight-line code (MAX_SPLITS is a constant): the loads of all
    // splits are in flight together.
    var m = NEG_BIG;
    var o = vec4<f32>(0.0);
    var l = 0.0;
    for (var z = 0u; z < MAX_SPLITS; z++) {
        if (z < call.n_splits) {
            let rec = part_record(z, t);
            let ml = parts[part_stats(rec, h)];
            let oz = parts[rec + i];
            let m_new = max(m, ml.x);
            let a = exp(m - m_new);
            let b = exp(ml.x - m_new);
            o = o * a + oz * b;
            l = l * a + ml.y * b;
            m = m_new;
        }
    }
    att[t * (Q_DIM / 4u) + i] = o / l;
}
