// Decode attention output stage with the wo matvec fused in: the chunk's unnormalized output times
// head h's HEAD_DIM columns of wo (a D_MODEL-wide share of the attention block's output, linear in
// the output, so the online-softmax merge can come after it), with the chunk's max and sum, as
// record `rec` of [N_HEADS][n_chunks][D_MODEL + 2]. The next matvecs merge the records
// (attn_merge.wgsl): the gate/up input stage (in_norm_attn.wgsl) and matvec_down's residual add
// (bias_attn.wgsl). Prepended: weights.wgsl and a quant/*.wgsl (dequant8).

struct WoParams {
    offset: u32, // byte offset of wo (D_MODEL rows of Q_DIM values) in W
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(1) var<uniform> wo: WoParams;
@group(0) @binding(3) var<storage, read_write> part: array<f32>;

fn put_output(lid: u32, h: u32, rec: u32, m: f32, l: f32) {
    let b = rec * (D_MODEL + 2u);
    let row_bytes = Q_DIM / QK * BLOCK_BYTES;
    // One row per invocation: its HEAD_DIM weights are independent loads, in flight together.
    for (var r = lid; r < D_MODEL; r += WG) {
        let w = wo.offset + r * row_bytes;
        var acc = 0.0;
        for (var e = 0u; e < HEAD_DIM / 8u; e++) {
            let a = dequant8(w, h * HEAD_DIM + 8u * e);
            acc += dot(a.lo, o_head[2u * e]) + dot(a.hi, o_head[2u * e + 1u]);
        }
        part[b + r] = acc;
    }
    if (lid == 0u) {
        part[b + D_MODEL] = m;
        part[b + D_MODEL + 1u] = l;
    }
}
