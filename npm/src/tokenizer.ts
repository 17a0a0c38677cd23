// `Tokenizer`: a model's text side without its weights, read from its GGUF header alone (a file's first bytes, a
// Blob's slice, or a URL's first bytes through HTTP Range requests), so that counting tokens never downloads a model and
// a page whose model runs elsewhere tokenizes and renders chats synchronously. Its methods are text.ts's `TextSide`, as
// `LLM`'s are, on a `TextEngine` (crate/src/wasm/text.rs) in the one-thread build.
import type { TextEngine, Wasm } from './builds.js';
import { EngineHandle, engineError } from './engine.js';
import { AbortError, RuvllmError, invalid, throwIfAborted } from './errors.js';
import { oneThreadBuild, openModelPrefix } from './platform.js';
import type { ModelSource, PrefixReader } from './source.js';
import { TextSide } from './text.js';

/** `Tokenizer.load`'s options. */
export interface TokenizerLoadOptions {
  /** A Jinja chat template to use instead of the file's (as `LoadOptions.chatTemplate`). */
  chatTemplate?: string;
  signal?: AbortSignal;
}

/** What a `Tokenizer` knows of its model. */
export interface TokenizerInfo {
  name: string | null;
  architecture: string;
  vocabSize: number;
  hasChatTemplate: boolean;
  /** The beginning- and end-of-sequence token ids (null where the vocabulary has none). */
  bos: number | null;
  eos: number | null;
  /** The context the model was trained at (null where the header does not say). */
  contextLength: number | null;
  /** The weights as the header's tensor table lists them (what a catalogue shows before a download): elements of all
   * tensors, and the type holding most of the matrices' bytes (null without matrices: a vocabulary-only file). */
  parameters: number;
  quantization: string | null;
  /** Bytes of the file its header takes: what was needed of it (a read may have fetched up to twice as much). */
  headerBytes: number;
}

/** The first read of a source: a small vocabulary's header whole, a large one's in a few reads (each at least doubles
 * what was read, so no more than twice the header is read). */
const FIRST_READ = 256 << 10;

/**
 * A model's tokenizer and chat template, loaded from its GGUF header alone: `tokenize`, `detokenize`,
 * `applyChatTemplate`, `tokenizeChat`, `chatPrompt` and `toolCallReader` answer as a loaded `LLM`'s do, synchronously.
 */
export class Tokenizer extends TextSide {
  readonly #engine: EngineHandle<TextEngine>;
  readonly #headerBytes: number;

  private constructor(engine: EngineHandle<TextEngine>, headerBytes: number) {
    super(engine);
    this.#engine = engine;
    this.#headerBytes = headerBytes;
  }

  /** Read the tokenizer and chat template of the GGUF model `source` (what `LLM.load` takes: a path in Node, a URL,
   * a Request or Response, a Blob or File, bytes) from its header only: a URL is read with HTTP Range requests (a
   * server that ignores them is read only as far as the header); a file or Blob is read from its start as far as its
   * header. Not a GGUF, or a file that ends inside its header: `E_GGUF`. */
  static async load(source: ModelSource, options: TokenizerLoadOptions = {}): Promise<Tokenizer> {
    const { chatTemplate, signal } = options;
    if (chatTemplate !== undefined && typeof chatTemplate !== 'string') throw invalid('chatTemplate must be a string (a Jinja template)');
    const header = await readModelHeader(source, signal);
    return new Tokenizer(await textEngine(header, chatTemplate), header.length);
  }

  info(): TokenizerInfo {
    const i = JSON.parse(this.#engine.call((e) => e.info()));
    return {
      name: i.name ?? null,
      architecture: i.architecture,
      vocabSize: i.vocab_size,
      hasChatTemplate: i.has_chat_template,
      bos: i.bos ?? null,
      eos: i.eos ?? null,
      contextLength: i.context_length ?? null,
      parameters: i.parameters,
      quantization: i.quantization ?? null,
      headerBytes: this.#headerBytes,
    };
  }

  /** Free the tokenizer's memory; later calls are `E_DISPOSED`. Idempotent. */
  dispose(): void {
    this.#engine.dispose();
  }
}

/** The GGUF header of `source` (what `LLM.load` takes), read from its start as far as the header goes (see `load`). */
export async function readModelHeader(source: ModelSource, signal: AbortSignal | undefined): Promise<Uint8Array> {
  throwIfAborted(signal);
  const wasm = await oneThreadBuild();
  let reader: PrefixReader | undefined;
  try {
    reader = openModelPrefix(source, signal);
    return await readHeader(reader, (prefix) => glueCall(wasm, () => wasm.glue.TextEngine.headerBytes(prefix)), signal);
  } catch (e) {
    if (signal?.aborted && !(e instanceof AbortError)) throw new AbortError(signal.reason);
    throw e;
  } finally {
    await reader?.close();
  }
}

/** A `TextEngine` of a GGUF `header` in the one-thread build, held as a model's engine is: a `Tokenizer`'s, and a
 * worker-backed `LLM`'s text side in its page. */
export async function textEngine(header: Uint8Array, chatTemplate: string | undefined): Promise<EngineHandle<TextEngine>> {
  const wasm = await oneThreadBuild();
  const engine = glueCall(wasm, () => new wasm.glue.TextEngine(header, JSON.stringify({ chatTemplate })));
  return new EngineHandle(engine, wasm);
}

function glueCall<T>(wasm: Wasm, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    throw engineError(e, wasm.glue, 'load the tokenizer again');
  }
}

/** The header of the file `reader` reads: a prefix grown to at least what `headerBytes` says it needs (and at least
 * doubled each time), until it holds the whole header. */
async function readHeader(reader: PrefixReader, headerBytes: (prefix: Uint8Array) => number, signal: AbortSignal | undefined): Promise<Uint8Array> {
  let want = FIRST_READ;
  for (;;) {
    const prefix = await reader.read(want);
    throwIfAborted(signal);
    const need = headerBytes(prefix);
    if (need <= prefix.length) return prefix.subarray(0, need);
    if (prefix.length < want) {
      throw new RuvllmError('E_GGUF', `truncated: the file ends at byte ${prefix.length}, inside its header (which needs at least ${need})`);
    }
    want = Math.max(need, 2 * want);
  }
}
