fn put_best(k: u32, v: f32, i: u32) {}
