//! One error type for the whole engine. Every fallible public function returns `Result<T>`;
//! each variant names the problem so that a user (or the npm package, through `code()`) can act on it.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The bytes are not a GGUF file we can read: wrong magic, unsupported version, truncated, or inconsistent.
    Gguf(String),
    /// A tensor type this engine does not implement (ggml type id and name if known).
    UnsupportedTensorType { tensor: String, type_id: u32 },
    /// `general.architecture` names a model family we do not run.
    UnsupportedArchitecture(String),
    /// The model lacks a tensor or metadata key it needs, or one has the wrong shape.
    Model(String),
    /// Tokenizer metadata is missing or inconsistent.
    Tokenizer(String),
    /// The chat template is missing or failed to render.
    ChatTemplate(String),
    /// A token id outside `0..vocab_size`.
    TokenOutOfRange { id: u32, vocab_size: usize },
    /// The prompt plus generation does not fit in the context window.
    ContextOverflow { needed: usize, context: usize },
    /// A request option is out of range.
    InvalidArgument(String),
    /// An I/O error (native only), with the path.
    Io(String),
    /// The KV cache's format cannot be had here: a quantized cold tier for a head size that is not whole
    /// blocks, or a saved state of another KV format.
    KvCache(String),
    /// The WebGPU backend could not run (`kind` says why); under `Backend::Auto` the CPU takes over instead.
    Gpu { kind: GpuFault, message: String },
    /// Bytes that are not an HNSW index, or a record that does not belong with the others (`IndexError` says how).
    Index(crate::index::IndexError),
    /// A LoRA adapter that is not one (GGUF metadata), or not for this model (architecture, tensor names or shapes).
    Adapter(String),
    /// Memory for `what` could not be allocated (`bytes` in all).
    OutOfMemory { bytes: usize, what: String },
    /// A grammar or JSON Schema that does not compile, uses a feature the constraint engine lacks, or is over its
    /// bounds (`constraint`); the message says which keyword or rule and where.
    Grammar(String),
}

/// Why the WebGPU backend failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuFault {
    /// No GPU adapter (or none but a software one where a hardware one was required), or no `gpu` feature.
    NoAdapter,
    /// The device's limits are below what the model needs.
    Limits,
    /// The model uses something the GPU kernels do not implement (a tensor type, a head size).
    Unsupported,
    /// A shader failed to compile or a pipeline failed validation.
    Shader,
    /// A buffer could not be allocated.
    OutOfMemory,
    /// The device was lost (driver reset, device destroyed) or reported an error while running.
    DeviceLost,
}

impl GpuFault {
    pub fn code(self) -> &'static str {
        match self {
            GpuFault::NoAdapter => "E_GPU_NO_ADAPTER",
            GpuFault::Limits => "E_GPU_LIMITS",
            GpuFault::Unsupported => "E_GPU_UNSUPPORTED",
            GpuFault::Shader => "E_GPU_SHADER",
            GpuFault::OutOfMemory => "E_GPU_OUT_OF_MEMORY",
            GpuFault::DeviceLost => "E_GPU_DEVICE_LOST",
        }
    }
}

impl Error {
    /// A stable, machine-readable code (used as `error.code` in JavaScript).
    pub fn code(&self) -> &'static str {
        match self {
            Error::Gguf(_) => "E_GGUF",
            Error::UnsupportedTensorType { .. } => "E_UNSUPPORTED_TENSOR_TYPE",
            Error::UnsupportedArchitecture(_) => "E_UNSUPPORTED_ARCH",
            Error::Model(_) => "E_MODEL",
            Error::Tokenizer(_) => "E_TOKENIZER",
            Error::ChatTemplate(_) => "E_CHAT_TEMPLATE",
            Error::TokenOutOfRange { .. } => "E_TOKEN_OUT_OF_RANGE",
            Error::ContextOverflow { .. } => "E_CONTEXT_OVERFLOW",
            Error::InvalidArgument(_) => "E_INVALID_ARGUMENT",
            Error::Io(_) => "E_IO",
            Error::KvCache(_) => "E_KV_CACHE",
            Error::Gpu { kind, .. } => kind.code(),
            Error::Index(_) => "E_INDEX",
            Error::Adapter(_) => "E_ADAPTER",
            Error::OutOfMemory { .. } => "E_OUT_OF_MEMORY",
            Error::Grammar(_) => "E_GRAMMAR",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Gguf(m) => write!(f, "invalid GGUF: {m}"),
            Error::UnsupportedTensorType { tensor, type_id } => {
                write!(f, "tensor '{tensor}' has unsupported ggml type {type_id}")
            }
            Error::UnsupportedArchitecture(a) => write!(f, "unsupported model architecture '{a}'"),
            Error::Model(m) => write!(f, "model: {m}"),
            Error::Tokenizer(m) => write!(f, "tokenizer: {m}"),
            Error::ChatTemplate(m) => write!(f, "chat template: {m}"),
            Error::TokenOutOfRange { id, vocab_size } => {
                write!(f, "token id {id} is out of range (vocabulary has {vocab_size} tokens)")
            }
            Error::ContextOverflow { needed, context } => {
                write!(f, "{needed} tokens do not fit in the context window of {context}")
            }
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Io(m) => write!(f, "i/o: {m}"),
            Error::KvCache(m) => write!(f, "kv cache: {m}"),
            Error::Gpu { kind, message } => write!(f, "webgpu ({}): {message}", kind.code()),
            Error::Index(e) => write!(f, "{e}"),
            Error::Adapter(m) => write!(f, "lora adapter: {m}"),
            Error::OutOfMemory { bytes, what } => {
                write!(f, "cannot allocate {bytes} bytes ({:.1} MiB) of memory for {what}", *bytes as f64 / 1048576.0)
            }
            Error::Grammar(m) => write!(f, "grammar: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::index::IndexError> for Error {
    fn from(e: crate::index::IndexError) -> Error {
        match e {
            crate::index::IndexError::OutOfMemory { bytes, what } => Error::OutOfMemory { bytes, what },
            e => Error::Index(e),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
