// The text side's methods, which `LLM` and `Tokenizer` share: tokens, chat templates, chat prompts with tools and the
// reader of an answer's tool calls, all synchronous, on any engine that answers the text calls (`TextCalls`: a model's
// `Engine`, or a `TextEngine` made from a GGUF header alone). The chat request is checked by chat.ts's
// `chatRequestJson` for both.
import type { Glue, TextCalls } from './builds.js';
import { chatRequestJson, type ChatCompletionTool, type ChatMessage, type ChatPrompt, type ChatTemplateOptions, type ToolCallDelta, type ToolCallReader, type ToolFormat } from './chat.js';
import { invalid } from './errors.js';
import { tokenIds } from './options.js';

/** What the text side needs of its engine: an `EngineHandle` over an `Engine` or a `TextEngine`. */
export interface TextHandle {
  /** Call the engine; its errors become `RuvllmError`s. */
  call<T>(fn: (engine: TextCalls) => T): T;
  /** Call the engine's build (its glue); its errors as the engine's. */
  glueCall<T>(fn: (glue: Glue) => T): T;
  /** Throw unless the engine may be called (`E_DISPOSED`, or the error that retired it). */
  usable(): unknown;
}

/** A model's text side: what `LLM` and `Tokenizer` both answer, the same way. */
export class TextSide {
  readonly #text: TextHandle;

  protected constructor(handle: TextHandle) {
    this.#text = handle;
  }

  /** Token ids of `text`. `special`: parse special-token text like `<|im_end|>`. `prompt`: tokenize
   * exactly as `generate` does with a string (special tokens parsed, BOS added if the model asks). */
  tokenize(text: string, options: { special?: boolean; prompt?: boolean } = {}): number[] {
    if (typeof text !== 'string') throw invalid('text must be a string');
    const ids = this.#text.call((e) => (options.prompt ? e.tokenizePrompt(text) : e.tokenize(text, Boolean(options.special))));
    return Array.from(ids);
  }

  detokenize(ids: readonly number[] | Uint32Array): string {
    const checked = tokenIds(ids, 'ids');
    return this.#text.call((e) => e.detokenize(checked));
  }

  /** Render messages with the model's own chat template (GGUF `tokenizer.chat_template`). The text is the
   * template's: tokenizing it with special tokens parsed (`generate(text)`) also parses control-token text the
   * messages hold. `tokenizeChat` (what the chat API runs) keeps the messages' text as text. */
  applyChatTemplate(messages: ChatMessage[], options: ChatTemplateOptions = {}): string {
    const json = chatRequestJson(messages, options);
    return this.#text.call((e) => e.applyChatTemplate(json));
  }

  /** The prompt ids of `messages` in the model's chat template, as the chat API generates from them. Control
   * tokens written in a message (`<|im_end|>`) are tokenized as text, so a message cannot end its turn or open
   * another; the template's own markup keeps its special tokens. `parseSpecialTokens: true` parses them in the
   * messages too (llama.cpp's behaviour): only for input you trust. */
  tokenizeChat(messages: ChatMessage[], options: ChatTemplateOptions & { parseSpecialTokens?: boolean } = {}): number[] {
    return this.chatPrompt(messages, options).ids;
  }

  /** What the chat API generates from: the prompt ids (as `tokenizeChat`), and where `tools` are offered (and
   * `toolChoice` is not `'none'`), the Lark grammar that holds the answer to the model's tool-call format and that
   * format's name (`'hermes'`, `'qwen_xml'`, `'gemma4'`, `'llama3'`, `'mistral'`, or `'generic'` for templates without
   * tools, whose answer is `{"tool_calls": [...]}` or `{"response": "..."}`). */
  chatPrompt(messages: ChatMessage[], options: ChatTemplateOptions & { parseSpecialTokens?: boolean } = {}): ChatPrompt {
    const json = chatRequestJson(messages, options);
    const parseSpecial = options.parseSpecialTokens ?? false;
    if (typeof parseSpecial !== 'boolean') throw invalid('parseSpecialTokens must be a boolean');
    const out = JSON.parse(this.#text.call((e) => e.chatPrompt(json, parseSpecial))) as { ids: number[]; grammar: string | null; tool_format: ToolFormat | null };
    return { ids: out.ids, grammar: out.grammar, toolFormat: out.tool_format };
  }

  /** A reader of the tool calls in an answer written in `format` (`chatPrompt(...).toolFormat`): `push` the answer's
   * text as it streams, then `finish` once; each returns what that text settled. `tools`: the request's, whose
   * parameter schemas type the values of a format that writes them untyped (`'qwen_xml'`: a string-typed parameter
   * stays a string where its text reads as a number). Used by the chat API. */
  toolCallReader(format: ToolFormat, tools?: readonly ChatCompletionTool[]): ToolCallReader {
    this.#text.usable();
    const toolsJson = tools === undefined ? undefined : JSON.stringify(tools);
    const parser = this.#text.glueCall((glue) => new glue.ToolCallParser(format, toolsJson));
    let done = false;
    const read = (json: string): ToolCallDelta[] => JSON.parse(json) as ToolCallDelta[];
    return {
      push: (text) => {
        if (done) throw invalid('the tool-call reader has finished');
        return read(parser.push(text));
      },
      finish: () => {
        if (done) return [];
        done = true;
        try {
          return read(parser.finish());
        } finally {
          parser.free();
        }
      },
    };
  }
}
