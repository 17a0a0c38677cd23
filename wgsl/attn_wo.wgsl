// Decode attention output stage with the wo matvec fused in (one key chunk per head: the session
// runs it only for contexts one workgroup covers): head h's normalized output times its HEAD_DIM
// columns of wo, a D_MODEL-wide share of the attention block's output, stored as row h of
// [N_HEADS][D_MODEL]. The next matvecs sum the rows (attn_heads.wgsl): the gate/up input stage
// (in_norm_attn.wgsl) and matvec_down's residual add (bias_attn.wgsl).
// Prepended: weights.wgsl and a quant/*.wgsl (dequant8).

struct WoParams {
    offset: u32, // byte offset of wo (D_MODEL rows of Q_DIM values) in W
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(1) var<uniform> wo: WoParams;
@group(0) @binding(3) var<storage, read_write> part: array<f32>;

const WO_PASSES: u32 = (D_MODEL + WG - 1u) / WG;

fn put_output(lid: u32, h: u32, rec: u32, m: f32, l: f32) {
    let row_bytes = Q_DIM / QK * BLOCK_BYTES;
    // One row per invocation and pass; constant trip counts, so every pass's loads can be in
    // flight together (a loop over rows with a run-time bound waits for each row's loads in turn).
    for (var p = 0u; p < WO_PASSES; p++) {
        let r = p * WG + lid;
        if (r < D_MODEL) {
            let w = wo.offset + r * row_bytes;
            var acc = 0.0;
            for (var e = 0u; e < HEAD_DIM / 8u; e++) {
                let a = dequant8(w, h * HEAD_DIM + 8u * e);
                acc += dot(a.lo, o_head[2u * e]) + dot(a.hi, o_head[2u * e + 1u]);
            }
            part[h * D_MODEL + r] = acc / l;
        }
    }
}
