fn bias(r: u32) -> f32 {
    return 0.0;
}

fn bias_prepare(lid: u32) {}
