// Needs: the header (BIND_*, CallParams), `PerLayerParams`, declared from its Rust struct (ops/per_layer.rs),
// glu_gelu.wgsl (glu).
// Gemma 4's gate on a layer's per-layer input: gate = gelu(gate) * input, in place over the gate rows ([n][width],
// `inp_gate` times the residual stream), `input` the layer's rows of the per-layer inputs (per_layer_in.wgsl,
// [n][n_layers * width]). One invocation per value, workgroups of 256, by tokens.

@group(0) @binding(BIND_PARAMS) var<uniform> pp: PerLayerParams;
@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> gate: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> inputs: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let i = gid.x;
    if (t >= call.n || i >= pp.width) {
        return;
    }
    let g = t * pp.width + i;
    gate[g] = glu(gate[g], inputs[t * pp.all + pp.layer * pp.width + i]);
}
