// Needs: weights.wgsl (the byte readers), matvec_q8.wgsl's staged input (xq, xd, xsum). Provides
// unit_dot to matvec_q8.wgsl. Q6_K's layout: quant/q6_k.wgsl.

// The dot product of row `w` (byte offset) with the staged input over unit `u` of the pass at
// column t0. Unit j = u % 4 of a block is half h = j / 2 of it, columns 16 * (j % 2) .. + 16 of each
// of that half's four runs of 32 (128h + 32r + ...): they share their 16 low-nibble bytes (runs 0
// and 2, or 1 and 3) and their 16 bytes of top bits, and each run has one scale there. Quants are
// stored as q + 32 (0..63, so dot4I8Packed takes them as they are); the 32 comes off as
// 32 * sum(input). Blocks are 210 bytes: every other one starts 2 bytes into a word (w_u32).
fn unit_dot(w: u32, t0: u32, u: u32) -> f32 {
    let j = u % 4u;
    let h = j / 2u;
    let part = j % 2u;
    let b = w + (t0 / 256u + u / 4u) * 210u;
    let ql = b + 64u * h + 16u * part; // runs 0 and 2; runs 1 and 3 at ql + 32
    let qh = b + 128u + 32u * h + 16u * part;
    let x0 = (u / 4u) * 16u + 8u * h + part; // xq element of run 0; run r at x0 + 2r
    let m4 = 0x0F0F0F0Fu;
    let m2 = 0x30303030u;
    var s = vec4<i32>(0); // per run
    for (var i = 0u; i < 4u; i++) {
        let a = w_u32(ql + 4u * i);
        let c = w_u32(ql + 32u + 4u * i);
        let t = w_u32(qh + 4u * i);
        s.x += dot4I8Packed((a & m4) | ((t << 4u) & m2), xq[x0][i]);
        s.y += dot4I8Packed((c & m4) | ((t << 2u) & m2), xq[x0 + 2u][i]);
        s.z += dot4I8Packed(((a >> 4u) & m4) | (t & m2), xq[x0 + 4u][i]);
        s.w += dot4I8Packed(((c >> 4u) & m4) | ((t >> 2u) & m2), xq[x0 + 6u][i]);
    }
    let sums = vec4<i32>(xsum[x0], xsum[x0 + 2u], xsum[x0 + 4u], xsum[x0 + 6u]);
    // Scales 8h + 2r + part: bytes sc and sc + 2, sc + 4, sc + 6.
    let sc = b + 192u + 8u * h + part;
    let scales = vec4<f32>(f32(sbyte(sc)), f32(sbyte(sc + 2u)), f32(sbyte(sc + 4u)), f32(sbyte(sc + 6u)));
    let xds = vec4<f32>(xd[x0 / 2u], xd[x0 / 2u + 1u], xd[x0 / 2u + 2u], xd[x0 / 2u + 3u]);
    return w_f16(b + 208u) * dot(scales * xds, vec4<f32>(s - 32 * sums));
}
