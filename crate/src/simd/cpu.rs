//! What this CPU can run, for every kernel that picks an instruction set at run time: on x86_64 AVX2+FMA+F16C
//! (`has_avx2`, the features of every x86_64 kernel), AVX-512 (`has_avx512`, attention's 512-bit kernels) and
//! AVX512-VNNI (`has_vnni`, the quantized kernels' `vpdpbusd`),
//! on aarch64 the dotprod extension (`has_dotprod`, the quantized NEON kernels' `sdot`). NEON itself (aarch64's
//! baseline) and wasm32's simd128 are compile-time features: nothing to detect.
//!
//! `RUVLLM_CPU=avx2` in the environment (read once, with the detection) makes `has_avx512` and `has_vnni` say no on a
//! CPU that has them, so that the AVX2-only kernels can be run and measured there; any other value changes nothing.

/// Whether this CPU has AVX2, FMA and F16C, the features every x86_64 kernel is compiled for (detected once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2() -> bool {
    static DETECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DETECTED.get_or_init(|| {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
    })
}

/// Whether this CPU has AVX-512 F and VL, for the 512-bit float kernels (attention's; detected once; false under
/// `RUVLLM_CPU=avx2`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    static DETECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DETECTED.get_or_init(|| {
        std::env::var("RUVLLM_CPU").as_deref() != Ok("avx2")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
    })
}

/// Whether this CPU has AVX512-VNNI with 256-bit vectors (AVX512VL), for the quantized kernels' `vpdpbusd`
/// (detected once; false under `RUVLLM_CPU=avx2`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_vnni() -> bool {
    static DETECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DETECTED.get_or_init(|| has_avx512() && is_x86_feature_detected!("avx512vnni"))
}

/// Whether this CPU has the dotprod extension (`sdot`). One feature: std's own cache answers it.
#[cfg(target_arch = "aarch64")]
#[inline]
pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}
