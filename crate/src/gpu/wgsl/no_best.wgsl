// Needs: nothing. The output stage of matvecs not in OUT_ARGMAX (see best_out.wgsl).
fn put_best(k: u32, v: f32, i: u32) {}
