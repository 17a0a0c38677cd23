// Matvec "bias" of matvec_down in the fused decode path (OUT_MODE 5, an add): the attention
// block's output of the row (attn_heads.wgsl), so that x += attention + FFN is one store, and the
// attention block's residual add needs no dispatch of its own.
fn bias_prepare(lid: u32) {}

fn bias(r: u32) -> f32 {
    return attn_out(op.out_col0 + r);
}
