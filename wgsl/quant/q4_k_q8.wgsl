// Needs: weights.wgsl (W), k_scales.wgsl (scale_min_k4), matvec_q8.wgsl's staged input (xq, xd,
// xsum) and dot4. Provides unit_dot to matvec_q8.wgsl. Q4_K's layout: quant/q4_k.wgsl.

// The dot product of row `w` (byte offset) with the staged input over unit `u` of the pass at
// column t0: columns 64g..64g + 64 of a block, whose quants are the 32 bytes of nibble group g
// (low nibbles: sub-block 2g, high: 2g + 1). x = d * sc * q - dmin * m, so per sub-block
// sum(x * a) = d * sc * sum(q * a) - dmin * m * sum(a), with a = xd * (int8 input).
fn unit_dot(w: u32, t0: u32, u: u32) -> f32 {
    let col = t0 + 64u * u;
    let b = w + (col / 256u) * 144u;
    let g = (col % 256u) / 64u;
    let dm = unpack2x16float(W[b >> 2u]);
    let sm_lo = scale_min_k4(b + 4u, 2u * g);
    let sm_hi = scale_min_k4(b + 4u, 2u * g + 1u);
    let q = (b + 16u + 32u * g) >> 2u; // blocks and rows start 4-aligned: 144 = 36 words
    let m4 = vec4<u32>(0x0F0F0F0Fu);
    var lo = 0i;
    var hi = 0i;
    for (var h = 0u; h < 2u; h++) {
        let wq = vec4<u32>(W[q + 4u * h], W[q + 4u * h + 1u], W[q + 4u * h + 2u], W[q + 4u * h + 3u]);
        lo += dot4(wq & m4, xq[4u * u + h]);
        hi += dot4((wq >> vec4<u32>(4u)) & m4, xq[4u * u + 2u + h]);
    }
    let d_lo = xd[2u * u];
    let d_hi = xd[2u * u + 1u];
    let s_lo = f32(xsum[4u * u] + xsum[4u * u + 1u]);
    let s_hi = f32(xsum[4u * u + 2u] + xsum[4u * u + 3u]);
    return dm.x * (sm_lo.x * d_lo * f32(lo) + sm_hi.x * d_hi * f32(hi))
        - dm.y * (sm_lo.y * d_lo * s_lo + sm_hi.y * d_hi * s_hi);
}
