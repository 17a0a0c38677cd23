// Needs: nothing. The bias function of matrix ops without a bias (see bias.wgsl).
fn bias(r: u32) -> f32 {
    return 0.0;
}
