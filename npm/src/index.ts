// The API shared by the Node and browser entry points (which pick how the wasm module is loaded).
export { CANNOT_RUN_HERE, LLM } from './llm.js';
export type { RequestFeedback, RequestFeedbackResult } from './llm.js';
export { RemoteLLM } from './remote.js';
export type { ConnectOptions, RemoteGenerateChunk, RemoteGenerateResult, RemoteModelInfo, RemoteUsage } from './remote.js';
export { Tokenizer } from './tokenizer.js';
export type { TokenizerInfo, TokenizerLoadOptions } from './tokenizer.js';
export type { TextSide } from './text.js';
export type { EmbedOptions, GenerateChunk, GenerateResult, KvCacheOptions, KvCacheType, LoadOptions, ModelInfo, Pooling, PrefixCacheInfo, ScorePositions, Trajectory, TrajectorySink, Usage, WitnessInput, WitnessNote, WitnessSink, WorkerFallback } from './types.js';
export type { EmbeddingRequest, EmbeddingResponse, Embeddings } from './embeddings.js';
export type { GenerateOptions, Grammar } from './options.js';
export type { Backend, BackendFallback } from './backend.js';
export type { ThreadFallback } from './builds.js';
export type { LoadProgress, ModelSource } from './source.js';
export type { ModelCache, ModelCacheOption, StoredModel } from './models/cache.js';
export type { ModelStoreKind } from './models/store.js';
export { StoreFullError } from './models/store.js';
export { MAX_MODEL_BYTES } from './source.js';
export type {
  Chat,
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionChunkToolCall,
  ChatCompletionMessageToolCall,
  ChatCompletionRequest,
  ChatCompletionTool,
  ChatCompletionToolChoice,
  ChatCompletionUsage,
  ChatMessage,
  ChatPrompt,
  ChatTemplateOptions,
  ResponseFormat,
  ToolCallDelta,
  ToolCallReader,
  ToolFormat,
} from './chat.js';
export { AbortError, RemoteError, RuvllmError } from './errors.js';
export type { PrefixStore, Store, StoredRecord } from './store/store.js';
export { MAX_RECORD_BYTES, RefusedRecords } from './store/store.js';
export { IndexedDbStore } from './store/indexeddb.js';
export type { IndexedDbStoreOptions } from './store/indexeddb.js';
export { VectorIndex } from './vectors/vector-index.js';
export type { IndexEntry, IndexHit, IndexInfo, SearchOptions, StoreSpec, VectorIndexOptions } from './vectors/vector-index.js';
export type { GraphOptions, Metric } from './vectors/stored.js';
export { Router } from './vectors/router.js';
export type { RouteDecision, RouteDefinition, RouteScore, RouteSummary, RouterOptions } from './vectors/router.js';
export { Memory } from './vectors/memory.js';
export { MicroLora } from './microlora.js';
export type { Feedback, FeedbackResult, MicroLoraInfo, MicroLoraOptions, Projection } from './microlora.js';
export type { MemoryInfo, MemoryOptions, RecallOptions, RecalledTurn } from './vectors/memory.js';
export { WitnessLog } from './vectors/witness.js';
export type { WitnessEntry, WitnessFilter, WitnessHit, WitnessInfo, WitnessOptions } from './vectors/witness.js';
export { LearningLoop } from './vectors/learning.js';
export type { DeepOptions, DeepResult, LearnedPattern, LearningAdapterOptions, LearningInfo, LearningOptions, LearningRun } from './vectors/learning.js';
export type { StoreError, StoreLoad } from './store/persistence.js';
export type { ErrorCode } from './errors.js';
