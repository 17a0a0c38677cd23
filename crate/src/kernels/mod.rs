//! CPU kernels of the forward pass, one op per file. Quantized dot products live in [`crate::quant`];
//! these are the ops built on them (matmul) and the small f32 ops between them. They take slices,
//! shapes and blocks ([`crate::quant::QuantMatrix`], a layer's cached keys and values), never the
//! model's or the KV cache's types; their threads come from [`crate::parallel`].
//!
//! # Design
//!
//! One op per file: `matmul`, `attention`, `rmsnorm`, `rope`, `swiglu`, `exp`, `f16`, `gelu` (BERT's feed-forward and
//! Gemma's GeGLU), `delta_net` (Qwen3.5's linear attention: a causal convolution and the gated delta rule, each
//! carrying its state from one call to the next), and the encoder's `layernorm` and `full_attention` (one sequence, no mask, f32 keys and values: no KV cache). They take slices, shapes and
//! `QuantMatrix`es (attention: a `KvRows` view of slices), never the model's or the KV cache's types, so they are tested
//! alone. `matmul` splits work over
//! weight rows (each read once per call, in chunks of 16 rows, so no two threads write one cache line of the output)
//! and runs matrices that share an input (q/k/v, gate/up) as one parallel loop. `attention` is causal GQA over the cached keys
//! and values, within a sliding window where the layer has one (Gemma 3: the blocks before it are not read, the block it
//! starts in is read from there, so a batch and one row still agree bit for bit), softmax over
//! blocks of 32 positions folded as in flash attention; the query heads of a KV head go together so each cached row is
//! converted once (`f16/`: fused kernels that keep a tile of rows' sums in registers on x86_64 and wasm32). A layer's cache is a `KvRows`: positions before `n_cold`
//! in the cold tier (`ColdRows`: Q8_0 or Q4_0 rows, read by `quant::kv`), the others f16 rows; the boundary is a
//! multiple of 32, so each block lies in one tier and `attend_cached` picks its kernels once per block. A decode row runs
//! one task per (KV head, block), a batch one per (`GROUP_TOKENS` = 16 tokens, KV head), which converts each hot block's
//! f16 keys and values to f32 once for its tokens (`f16::F32Rows`; re-reading and converting the cache for every token
//! was most of a long prefill's time) and scores all their rows against it together, while a cold block's rows are
//! unpacked by `quant::kv` as they are read: both do the same float operations per row (a row converted before or as it
//! is read gives the same bits; a row's scores and sums do not depend on the rows beside it, and positions a row does
//! not see weigh exactly 0), so results depend neither on the batch nor on the threads. `exp` is ggml's `expf` approximation in plain f32 code that vectorizes (libm's does not).

pub mod attention;
pub mod delta_net;
pub mod exp;
pub mod f16;
pub mod full_attention;
pub mod gelu;
pub mod layernorm;
pub mod matmul;
pub mod rmsnorm;
pub mod rope;
pub mod swiglu;
