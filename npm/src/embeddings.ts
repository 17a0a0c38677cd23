// OpenAI-shaped embeddings over LLM.embed: `llm.embeddings.create({ input })`.
import { invalid } from './errors.js';
import type { EmbedOptions, Pooling } from './types.js';

export interface EmbeddingRequest {
  /** One text or several. */
  input: string | string[];
  /** Echoed back (the loaded model answers whatever it says). */
  model?: string;
  /** Only 'float'. */
  encoding_format?: 'float';
  /** Not OpenAI's: the pooling (default: the model's own, else mean). */
  pooling?: Pooling;
}

export interface EmbeddingResponse {
  object: 'list';
  data: Array<{ object: 'embedding'; index: number; embedding: number[] }>;
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

export interface Embeddings {
  create(body: EmbeddingRequest, options?: { signal?: AbortSignal }): Promise<EmbeddingResponse>;
}

const FIELDS = new Set(['input', 'model', 'encoding_format', 'pooling', 'user']);

/** What the embeddings API needs of its model (an `LLM`): embeddings with their token count, and the model's name. */
export interface EmbeddingsHost {
  embedWithUsage(texts: string | readonly string[], options: EmbedOptions): Promise<{ embeddings: number[][]; tokens: number }>;
  info(): { name: string | null };
}

export function createEmbeddings(llm: EmbeddingsHost): Embeddings {
  return {
    async create(body, { signal } = {}) {
      if (typeof body !== 'object' || body === null) throw invalid('the request must be an object');
      for (const field of Object.keys(body)) {
        if (!FIELDS.has(field)) throw invalid(`unsupported embeddings field '${field}'`);
      }
      if (body.encoding_format !== undefined && body.encoding_format !== 'float') throw invalid("only encoding_format 'float' is supported");
      const { embeddings, tokens } = await llm.embedWithUsage(body.input, { pooling: body.pooling, normalize: true, signal });
      return {
        object: 'list',
        data: embeddings.map((embedding, index) => ({ object: 'embedding', index, embedding })),
        model: body.model ?? llm.info().name ?? 'ruvllm',
        usage: { prompt_tokens: tokens, total_tokens: tokens },
      };
    },
  };
}
