// SwiGLU of the prefill feed-forward: h = silu(gate) * up, from rows [gate (FFN) | up (FFN)].

@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read_write> h: array<f32>;
@group(0) @binding(5) var<storage, read> gu: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let r = gid.x;
    if (t >= step.n || r >= FFN) {
        return;
    }
    let g = gu[t * 2u * FFN + r];
    let u = gu[t * 2u * FFN + FFN + r];
    h[t * FFN + r] = g / (1.0 + exp(-g)) * u;
}
