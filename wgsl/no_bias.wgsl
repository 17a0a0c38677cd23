fn bias(r: u32) -> f32 {
    return 0.0;
}
