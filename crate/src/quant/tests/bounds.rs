//! Round-trip error bounds of the legacy and float types, element by element, from how each quantizer
//! picks its scale.

/// Half an f16 ulp, relative (normal range).
const F16_REL: f32 = 1.0 / 2048.0;

/// The rounding error of storing `v` as f16: half an ulp, which is 2^-25 for subnormals.
pub(super) fn f16_error(v: f32) -> f32 {
    (v.abs() * F16_REL).max(2f32.powi(-25))
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, v| m.max(v.abs()))
}

/// Symmetric types (Q4_0, Q5_0): `levels` steps of `amax / levels` on the side of the largest
/// magnitude, one fewer on the other side, where values beyond the last level clamp to it.
fn symmetric_bound(block: &[f32], x: f32, levels: f32) -> f32 {
    let max = block.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let step = max.abs() / levels;
    let clamped = if x * max < 0.0 { x.abs() - (levels - 1.0) * step } else { 0.0 };
    // Rounding to the nearest level, the f16 scale's error times the level, f32 arithmetic.
    (0.5 * step).max(clamped) + levels * f16_error(step) + max.abs() * 1e-6
}

/// Offset types (Q4_1, Q5_1): `levels` steps from the minimum, which is stored as f16.
fn offset_bound(block: &[f32], levels: f32) -> f32 {
    let (min, max) = block.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let step = (max - min) / levels;
    0.5 * step + levels * f16_error(step) + f16_error(min) + amax(block) * 1e-6
}

pub(super) fn q4_0(block: &[f32], x: f32) -> f32 {
    symmetric_bound(block, x, 8.0)
}

pub(super) fn q5_0(block: &[f32], x: f32) -> f32 {
    symmetric_bound(block, x, 16.0)
}

pub(super) fn q4_1(block: &[f32], _: f32) -> f32 {
    offset_bound(block, 15.0)
}

pub(super) fn q5_1(block: &[f32], _: f32) -> f32 {
    offset_bound(block, 31.0)
}

pub(super) fn q8_0(block: &[f32], _: f32) -> f32 {
    let step = amax(block) / 127.0;
    0.5 * step + 127.0 * f16_error(step) + amax(block) * 1e-6
}
