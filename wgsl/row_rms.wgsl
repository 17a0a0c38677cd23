// The RMSNorm scale of a D_MODEL row whose sum of squares is spread over a 256-invocation workgroup
// (each invocation passes its part `ss`): 1 / sqrt(mean(x^2) + eps). Shared by rmsnorm.wgsl and
// add_rmsnorm.wgsl; every invocation must call it (it has barriers).

var<workgroup> red: array<f32, 256>;

fn row_rms_scale(lid: u32, ss: f32) -> f32 {
    red[lid] = ss;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    return 1.0 / sqrt(red[0] / f32(D_MODEL) + EPS);
}
