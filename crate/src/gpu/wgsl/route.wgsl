// Needs: the header (BIND_*, FFN), the variant's N_EXPERTS, N_USED and EXPERT_FFN.
// A mixture of experts' routing, dense (model.rs): each token's N_USED experts of highest router logit (ties to
// the lower expert), weighted by the softmax over the chosen logits, as experts.rs's `route`; then every expert's
// EXPERT_FFN hidden values of the token's row of h (FFN = N_EXPERTS * EXPERT_FFN) scaled by its weight, 0 for the
// experts not chosen. The down product of the experts' matrices side by side then sums the chosen ones' outputs by
// their weights. One workgroup per token of the call.

@group(0) @binding(BIND_OUT) var<storage, read_write> h: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> logits: array<f32>;

// Each expert's weight; -1 while not chosen (a chosen weight is >= 0, even where exp underflows).
var<workgroup> weight: array<f32, N_EXPERTS>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.x;
    for (var e = lid; e < N_EXPERTS; e += 256u) {
        weight[e] = -1.0;
    }
    workgroupBarrier();
    // N_EXPERTS * N_USED comparisons on one invocation: a few thousand at most (N_EXPERTS <= 512).
    if (lid == 0u) {
        let row = t * N_EXPERTS;
        var top = 0.0;
        var sum = 0.0;
        for (var k = 0u; k < N_USED; k++) {
            var best = N_EXPERTS;
            var best_v = 0.0;
            for (var e = 0u; e < N_EXPERTS; e++) {
                let v = logits[row + e];
                if (weight[e] < 0.0 && (best == N_EXPERTS || v > best_v)) {
                    best = e;
                    best_v = v;
                }
            }
            if (k == 0u) {
                top = best_v;
            }
            let w = exp(best_v - top);
            weight[best] = w;
            sum += w;
        }
        for (var e = 0u; e < N_EXPERTS; e++) {
            weight[e] = max(weight[e], 0.0) / sum;
        }
    }
    workgroupBarrier();
    let base = t * FFN;
    for (var i = lid; i < FFN; i += 256u) {
        h[base + i] *= weight[i / EXPERT_FFN];
    }
}
