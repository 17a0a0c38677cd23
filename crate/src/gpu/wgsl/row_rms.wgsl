// Needs: the header (D_MODEL, EPS), a reduce_*.wgsl (team_sum2).
// The RMSNorm scale of a D_MODEL row whose sum of squares is spread over a 256-invocation workgroup
// (each invocation passes its part `ss`): 1 / sqrt(mean(x^2) + eps). Shared by rmsnorm.wgsl and
// add_rmsnorm.wgsl, after a reduce_*.wgsl; every invocation must call it (it has barriers).

fn row_rms_scale(lid: u32, ss: f32) -> f32 {
    let sum = team_sum2(lid, vec2<f32>(ss, 0.0), 256u).x;
    return 1.0 / sqrt(sum / f32(D_MODEL) + EPS);
}
