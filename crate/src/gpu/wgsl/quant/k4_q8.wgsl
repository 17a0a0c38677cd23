// Needs: weights.wgsl (W), k_scales.wgsl (scale_min_k4), the type's quant/*.wgsl (BLOCK_BYTES),
// matvec_q8.wgsl's staged input (xq, xd, xsum) and dot4, the variant's FIFTH_BIT (Q5_K; Q4_K without).
// Provides unit_dot to matvec_q8.wgsl for Q4_K and Q5_K. Their layouts: quant/q4_k.wgsl, quant/q5_k.wgsl.

// The dot product of row `w` (byte offset) with the staged input over unit `u` of the pass at
// column t0: columns 64g..64g + 64 of a block, whose quants are the 32 bytes of nibble group g
// (low nibbles: sub-block 2g, high: 2g + 1), and in Q5_K bits 2g and 2g + 1 of the 32 high-bit
// bytes. x = d * sc * q - dmin * m, so per sub-block sum(x * a) = d * sc * sum(q * a) - dmin * m *
// sum(a), with a = xd * (int8 input). Blocks (144 and 176 bytes) and rows start 4-aligned.
fn unit_dot(w: u32, t0: u32, u: u32) -> f32 {
    let col = t0 + 64u * u;
    let b = w + (col / 256u) * BLOCK_BYTES;
    let g = (col % 256u) / 64u;
    let dm = unpack2x16float(W[b >> 2u]);
    let sm_lo = scale_min_k4(b + 4u, 2u * g);
    let sm_hi = scale_min_k4(b + 4u, 2u * g + 1u);
    let q = (b + select(16u, 48u, FIFTH_BIT) + 32u * g) >> 2u; // Q5_K's high bits are bytes 16..48
    let qh = (b + 16u) >> 2u;
    let m4 = vec4<u32>(0x0F0F0F0Fu);
    let m1 = vec4<u32>(0x01010101u);
    var lo = 0i;
    var hi = 0i;
    for (var h = 0u; h < 2u; h++) {
        let wq = vec4<u32>(W[q + 4u * h], W[q + 4u * h + 1u], W[q + 4u * h + 2u], W[q + 4u * h + 3u]);
        var ql = wq & m4;
        var qu = (wq >> vec4<u32>(4u)) & m4;
        if (FIFTH_BIT) {
            let bits = vec4<u32>(W[qh + 4u * h], W[qh + 4u * h + 1u], W[qh + 4u * h + 2u], W[qh + 4u * h + 3u]);
            ql |= ((bits >> vec4<u32>(2u * g)) & m1) << vec4<u32>(4u);
            qu |= ((bits >> vec4<u32>(2u * g + 1u)) & m1) << vec4<u32>(4u);
        }
        lo += dot4(ql, xq[4u * u + h]);
        hi += dot4(qu, xq[4u * u + 2u + h]);
    }
    let d_lo = xd[2u * u];
    let d_hi = xd[2u * u + 1u];
    let s_lo = f32(xsum[4u * u] + xsum[4u * u + 1u]);
    let s_hi = f32(xsum[4u * u + 2u] + xsum[4u * u + 3u]);
    return dm.x * (sm_lo.x * d_lo * f32(lo) + sm_hi.x * d_hi * f32(hi))
        - dm.y * (sm_lo.y * d_lo * s_lo + sm_hi.y * d_hi * s_hi);
}
