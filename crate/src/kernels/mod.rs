//! CPU kernels of the forward pass, one op per file. Quantized dot products live in [`crate::quant`];
//! these are the ops built on them (matmul) and the small f32 ops between them. They take slices,
//! shapes and blocks ([`crate::quant::QuantMatrix`], a layer's cached keys and values), never the
//! model's or the KV cache's types; their threads come from [`crate::parallel`].

pub mod attention;
pub mod exp;
pub mod f16;
pub mod geglu;
pub mod matmul;
pub mod rmsnorm;
pub mod rope;
pub mod swiglu;
