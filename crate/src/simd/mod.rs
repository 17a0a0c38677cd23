//! The f32 vector primitives, one copy each for every caller: [`dot`], [`axpy`] (`y += a * x`) and
//! [`l2_squared`], for attention over the f16 KV cache, LoRA adapters and the vector index's metrics; and
//! `cpu`, where the CPU's features are detected for every kernel that picks an instruction set at run time
//! (these and `quant`'s).
//!
//! # Design
//!
//! Callers: `kernels/f16/` (attention), `kernels/delta_net.rs` (Qwen3.5's delta rule), `model/lora.rs` (adapters) and
//! `index/distance.rs` (metrics). Each primitive
//! has a scalar reference (`dot_ref`, `axpy_ref`, `l2_squared_ref`) and a kernel per ISA in its own file, as in
//! `quant/`: `simd/avx2.rs` (AVX2+FMA, on x86_64 when `cpu::has_avx2`), `simd/simd128.rs` (wasm32, at compile time) and
//! `simd/neon.rs` (aarch64, at compile time); elsewhere the reference runs. Each file's `hsum` sums a vector's lanes in
//! a fixed order of pairs (the AVX2 one serves `quant`'s kernels too). `cpu.rs` is the one place where the CPU's
//! features are detected: `has_avx2` (AVX2+FMA+F16C, once), `has_vnni` (AVX512-VNNI, for `quant`'s `vpdpbusd`) and
//! `has_dotprod` (aarch64's `sdot`).
//!
//! A kernel differs from its reference only in the order of its float additions and, on x86_64 and aarch64, in fused
//! multiply-adds (simd128 has none, and the relaxed-SIMD build does not use `f32x4.relaxed_madd`, which only some
//! engines fuse: both wasm builds give the same bits). That order is part of the results, so each kernel kept the one
//! it had before attention's and the index's kernels were merged here: `dot` adds in two accumulators on x86_64 and
//! wasm32, as attention's did (`kernels/f16/simd128.rs`'s fused kernels repeat `simd128::dot`'s and `simd128::axpy`'s
//! operations bit for bit, and with the index's four accumulators the llama.cpp comparison of `tests/rust/lora.rs`
//! left its bounds), and in four on aarch64, as the index's did (attention had no NEON kernel); `l2_squared` is the index's. `simd/tests.rs`
//! checks every kernel against its reference: exactly on values whose sums are exact in any order, within rounding on
//! huge, tiny and subnormal values, and for the same infinities and NaNs. `quant`'s float weights (`BlockF32`,
//! `BlockF16`, `BlockBF16`) keep a dot of their own (`float_dot`, generic over how a weight loads): one order for the
//! three types, which `matmul`'s `f16_dots` relies on.

pub(crate) mod cpu;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod simd128;

#[cfg(test)]
mod tests;

/// `sum(a[i] * b[i])`.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are equal.
        return unsafe { avx2::dot(a, b) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::dot(a, b);
    // SAFETY: NEON is part of the aarch64 baseline; the lengths are equal.
    #[cfg(target_arch = "aarch64")]
    return unsafe { neon::dot(a, b) };
    #[allow(unreachable_code)]
    dot_ref(a, b)
}

/// `y[i] += a * x[i]`.
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    assert_eq!(y.len(), x.len());
    #[cfg(target_arch = "x86_64")]
    if cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are equal.
        return unsafe { avx2::axpy(y, a, x) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::axpy(y, a, x);
    // SAFETY: NEON is part of the aarch64 baseline; the lengths are equal.
    #[cfg(target_arch = "aarch64")]
    return unsafe { neon::axpy(y, a, x) };
    #[allow(unreachable_code)]
    axpy_ref(y, a, x)
}

/// `sum((a[i] - b[i])²)`.
#[inline]
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are equal.
        return unsafe { avx2::l2_squared(a, b) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::l2_squared(a, b);
    // SAFETY: NEON is part of the aarch64 baseline; the lengths are equal.
    #[cfg(target_arch = "aarch64")]
    return unsafe { neon::l2_squared(a, b) };
    #[allow(unreachable_code)]
    l2_squared_ref(a, b)
}

/// The reference of [`dot`], summed in element order (the kernels sum their tails with it).
pub fn dot_ref(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(&a, &b)| a * b).sum()
}

/// The reference of [`axpy`]: a product and a sum, each rounded.
pub fn axpy_ref(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// The reference of [`l2_squared`], summed in element order.
pub fn l2_squared_ref(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(&a, &b)| (a - b) * (a - b)).sum()
}
