//! Wall-clock milliseconds on every target (`std::time::Instant` panics on wasm32-unknown-unknown).

#[cfg(not(target_arch = "wasm32"))]
pub fn now_ms() -> f64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
}

#[cfg(target_arch = "wasm32")]
pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// Milliseconds since the Unix epoch (the date templates print; 0 on a clock set before 1970).
#[cfg(not(target_arch = "wasm32"))]
pub fn unix_ms() -> f64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

#[cfg(target_arch = "wasm32")]
pub fn unix_ms() -> f64 {
    js_sys::Date::now()
}
