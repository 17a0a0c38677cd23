// Needs: the header (BIND_*, EPS), `PerLayerParams`, declared from its Rust struct (ops/per_layer.rs), a
// reduce_*.wgsl (team_sum2).
// Gemma 4's per-layer inputs (as llama.cpp's project_per_layer_inputs and the CPU's `per_layer_inputs`): for token t
// and layer l, input = (RMSNorm(proj · proj_scale) * w + e) * sum_scale, with `proj` the token's row of the
// embeddings' projection (`per_layer_model_proj`) and `e` its per-layer embedding (embed.wgsl, already times
// sqrt(width)), layer l's `width` values of each; `w` the norm weight (`per_layer_proj_norm`). In place over the
// embeddings' rows ([n][n_layers * width]). One workgroup per (layer, token) of the call.

@group(0) @binding(BIND_PARAMS) var<uniform> pp: PerLayerParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> inputs: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> proj: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> norm_w: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.y;
    let base = t * pp.all + wg.x * pp.width;
    let proj_scale = bitcast<f32>(pp.proj_scale);
    var ss = 0.0;
    for (var i = lid; i < pp.width; i += 256u) {
        let p = proj[base + i] * proj_scale;
        ss += p * p;
    }
    let sum = team_sum2(lid, vec2<f32>(ss, 0.0), 256u).x;
    let scale = 1.0 / sqrt(sum / f32(pp.width) + EPS);
    let sum_scale = bitcast<f32>(pp.sum_scale);
    for (var i = lid; i < pp.width; i += 256u) {
        let p = ((proj[base + i] * proj_scale) * scale) * norm_w[i];
        inputs[base + i] = (p + inputs[base + i]) * sum_scale;
    }
}
