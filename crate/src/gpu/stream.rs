//! A model streamed onto the GPU: its matrices go from the file's bytes, as they arrive, straight into the GPU's
//! buffers, and memory keeps only the header, the vectors (norms, biases) and the bytes the model's identity samples
//! (a file held in part, `gguf::bytes::PartialBytesBuilder`). A page can so run a model larger than its wasm32
//! memory, with no second copy of the file; the price: the model runs on that GPU only (the CPU has no matrices to
//! fall back to, `Model::check_weights_held`).
//!
//! The header, once whole, gives the config and the weights' layout (`Weights::layout`), from which the arenas are
//! planned and allocated before the first matrix arrives (`upload.rs`); the file's length must be known up front, as
//! the identity samples bytes across all of it. The model made of the held bytes is the one a whole load makes: the
//! same layout, vectors and identity, so prefix-cache pages and saved states move between the two.

use std::sync::Arc;

use super::device::Gpu;
use super::model::{check_supported, GpuModel};
use super::upload::{self, Placed, WeightUpload};
use super::GpuOptions;
use crate::error::{Error, Result};
use crate::gguf::bytes::PartialBytesBuilder;
use crate::gguf::id::ModelId;
use crate::gguf::{Gguf, Prefix};
use crate::model::config::Config;
use crate::model::weights::Weights;
use crate::model::Model;

/// A GGUF file of known length on its way to the GPU, pushed in order in chunks of any size.
pub struct GpuModelStream {
    len: u64,
    state: State,
}

enum State {
    /// Bytes until the header is whole; the header is tried again at `next_try` bytes (doubling: a long header is
    /// parsed a few times at most, whatever the chunk size).
    Header {
        gpu: Gpu,
        head: Vec<u8>,
        next_try: usize,
    },
    Body(Box<Body>),
    /// A push failed: the stream takes no more.
    Failed,
}

struct Body {
    upload: WeightUpload,
    placed: Placed,
    held: PartialBytesBuilder,
}

/// A streamed file whose every byte has arrived: the model made of its held bytes (options may still be set on it),
/// and its weights on the GPU, put together by [`into_gpu_model`](Self::into_gpu_model).
pub struct StreamedModel {
    pub model: Model,
    upload: WeightUpload,
    placed: Placed,
}

impl GpuModelStream {
    /// A stream of a file of `len` bytes onto a device opened with `opts` (errors: no adapter, limits). Any adapter
    /// will do, a software one too, as under `Backend::WebGpu`: a streamed model has no CPU copy to fall back on.
    pub async fn new(len: u64, opts: &GpuOptions) -> Result<GpuModelStream> {
        let gpu = Gpu::new(&GpuOptions { allow_software: true, ..opts.clone() }).await?;
        Ok(GpuModelStream { len, state: State::Header { gpu, head: Vec::new(), next_try: len.min(1 << 20) as usize } })
    }

    /// Take the file's next `chunk`. Errors: a header that is not GGUF or a model the GPU kernels do not run
    /// (once the header is whole), the GPU's or the header's memory; after an error the stream takes no more.
    pub async fn push(&mut self, chunk: &[u8]) -> Result<()> {
        let result = self.take(chunk).await;
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    async fn take(&mut self, chunk: &[u8]) -> Result<()> {
        let gguf = match &mut self.state {
            State::Body(body) => return body.push(chunk),
            State::Failed => return Err(Error::Model("this model stream failed earlier".into())),
            State::Header { head, next_try, .. } => {
                head.try_reserve(chunk.len()).map_err(|_| Error::OutOfMemory {
                    bytes: head.len() + chunk.len(),
                    what: "the model file's header".into(),
                })?;
                head.extend_from_slice(chunk);
                if head.len() < *next_try && (head.len() as u64) < self.len {
                    return Ok(());
                }
                match Gguf::parse_prefix(head, Some(self.len))? {
                    Prefix::Complete(g) => g,
                    Prefix::Need(n) => {
                        *next_try = n.max(head.len().saturating_mul(2));
                        return Ok(());
                    }
                }
            }
        };
        if let State::Header { gpu, head, .. } = std::mem::replace(&mut self.state, State::Failed) {
            self.state = State::Body(Box::new(Body::start(gpu, &gguf, self.len, &head).await?));
        }
        Ok(())
    }

    /// The model, once every byte has arrived (else an error, as for a file that ends early).
    pub fn finish(self) -> Result<StreamedModel> {
        match self.state {
            State::Body(body) => {
                let Body { upload, placed, held } = *body;
                let model = Model::from_bytes(held.finish()?)?;
                Ok(StreamedModel { model, upload, placed })
            }
            State::Header { head, .. } => {
                Err(Error::Gguf(format!("the file ended after {} bytes, within its header", head.len())))
            }
            State::Failed => Err(Error::Model("this model stream failed earlier".into())),
        }
    }
}

impl Body {
    /// Plan and allocate the GPU's buffers from `gguf`, the header of a file of `len` bytes, then take `head`, the
    /// bytes received so far.
    async fn start(gpu: Gpu, gguf: &Gguf, len: u64, head: &[u8]) -> Result<Body> {
        let config = Config::from_gguf(gguf)?;
        check_supported(&config)?;
        let (layout, vectors) = Weights::layout(gguf, &config)?;
        let (plan, placed) = upload::plan(&layout, &config, gpu.max_binding)?;
        let held_ranges = ModelId::hashed(len, gguf.data_offset).chain(vectors);
        let mut body = Body {
            upload: WeightUpload::new(gpu, plan).await?,
            placed,
            held: PartialBytesBuilder::new(len, held_ranges)?,
        };
        body.push(head)?;
        Ok(body)
    }

    fn push(&mut self, chunk: &[u8]) -> Result<()> {
        self.held.push(chunk);
        self.upload.push(chunk)
    }
}

impl StreamedModel {
    /// The model with its weights on the GPU.
    pub async fn into_gpu_model(self) -> Result<GpuModel> {
        GpuModel::uploaded(Arc::new(self.model), self.upload, self.placed).await
    }
}
