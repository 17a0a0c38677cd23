// The attention block's output in the fused decode path: the sum of attn_wo.wgsl's per-head rows
// ([N_HEADS][D_MODEL], binding 4). A constant trip count: the loads are independent and unrolled.
@group(0) @binding(4) var<storage, read> part: array<f32>;

fn attn_out(i: u32) -> f32 {
    var v = 0.0;
    for (var h = 0u; h < N_HEADS; h++) {
        v += part[h * D_MODEL + i];
    }
    return v;
}
