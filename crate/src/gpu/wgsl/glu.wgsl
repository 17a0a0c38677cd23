// Needs: the header (BIND_*, CallParams, FFN), glu_silu.wgsl or glu_gelu.wgsl (glu), the variant's SPLITS.
// The gated activation of the prefill feed-forward (SwiGLU, or Gemma's GeGLU): h = glu(gate, up), from rows
// [gate (FFN) | up (FFN)], or from the SPLITS partial products of a split gate/up matmul ([split][token][2 FFN],
// summed here: the split's reduce step folded in).

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> h: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> gu: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let r = gid.x;
    if (t >= call.n || r >= FFN) {
        return;
    }
    var g = 0.0;
    var u = 0.0;
    for (var z = 0u; z < SPLITS; z++) {
        let b = (z * call.n + t) * 2u * FFN + r;
        g += gu[b];
        u += gu[b + FFN];
    }
    h[t * FFN + r] = glu(g, u);
}
