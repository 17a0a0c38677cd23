//! SwiGLU gate of the feed-forward block: `gate = silu(gate) * up`, in place.

use crate::kernels::exp::Exp;

pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    let e = Exp::new();
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + e.at(-*g)) * u;
    }
}
