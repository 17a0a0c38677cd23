// The API shared by the Node and browser entry points (which pick how the wasm module is loaded).
export { LLM } from './llm.js';
export type { EmbedOptions, GenerateChunk, GenerateResult, KvCacheOptions, KvCacheType, LoadOptions, ModelInfo, Pooling, PrefixCacheInfo, ScorePositions, Usage } from './llm.js';
export type { EmbeddingRequest, EmbeddingResponse, Embeddings } from './embeddings.js';
export type { GenerateOptions } from './options.js';
export type { Backend, BackendFallback } from './backend.js';
export type { ThreadFallback } from './builds.js';
export type { LoadProgress, ModelSource } from './source.js';
export { MAX_MODEL_BYTES } from './source.js';
export type { Chat, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ChatCompletionUsage, ChatMessage } from './chat.js';
export { AbortError, RuvllmError } from './errors.js';
export type { PrefixStore, StoredRecord } from './store/store.js';
export type { StoreError, StoreLoad } from './store/persistence.js';
export type { ErrorCode } from './errors.js';
