//! What this CPU can run, for every kernel that picks an instruction set at run time: on x86_64 AVX2+FMA+F16C
//! (`has_avx2`, the features of every x86_64 kernel), AVX-512 (`has_avx512`, attention's 512-bit kernels) and
//! AVX512-VNNI (`has_vnni`, the quantized kernels' `vpdpbusd`),
//! on aarch64 the dotprod extension (`has_dotprod`, the quantized NEON kernels' `sdot`). NEON itself (aarch64's
//! baseline) and wasm32's simd128 are compile-time features: nothing to detect.
//!
//! `widest_fn!` compiles a plain loop once per x86_64 width and calls the widest the CPU has.
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

/// `widest_fn! { fn name(args) { body } }` defines `name`, compiled on x86_64 for AVX-512, for AVX2 and for the
/// baseline, the widest the CPU has picked at each call (elsewhere compiled once): for loops the compiler vectorizes
/// by itself (the softmax's and SwiGLU's exponentials), which the baseline compiles to 4-wide SSE. The float
/// operations are the source's at every width (Rust never fuses a multiply and an add), so the bits do not depend
/// on the choice.
macro_rules! widest_fn {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
                unsafe fn avx512($($arg: $ty),*) {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    body($($arg),*)
                }
                if $crate::simd::cpu::has_avx512() {
                    // SAFETY: the CPU has AVX-512 F and VL.
                    return unsafe { avx512($($arg),*) };
                }
                if $crate::simd::cpu::has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use widest_fn;
