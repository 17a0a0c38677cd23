//! SwiGLU gate of the feed-forward block: `gate = silu(gate) * up`, in place.

use crate::kernels::exp::Exp;
use crate::simd::cpu::widest_fn;

widest_fn! {
    /// Compiled for the widest vectors the CPU has (`widest_fn`: the same bits at any width).
    pub fn swiglu(gate: &mut [f32], up: &[f32]) {
        let e = Exp::new();
        for (g, &u) in gate.iter_mut().zip(up) {
            *g = *g / (1.0 + e.at(-*g)) * u;
        }
    }
}
