// Matvec "bias" of matvec_down in the fused decode path (OUT_MODE 5, an add): the merged attention
// output of the row (attn_merge.wgsl over attn_wo.wgsl's records), so that x += attention + FFN
// is one store, and the attention block's residual add needs no dispatch of its own.
@group(0) @binding(4) var<storage, read> part: array<f32>;

const REC: u32 = D_MODEL + 2u;

fn bias_prepare(lid: u32) {
    merge_prepare(lid);
}

fn bias(r: u32) -> f32 {
    return merged(op.out_col0 + r);
}
