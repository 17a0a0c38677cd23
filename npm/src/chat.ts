// The chat API: OpenAI-shaped chat completions over a model's chat template and `generate`
// (`llm.chat.completions.create({ messages, stream })`), and the check of the messages a template is rendered with.
import { invalid } from './errors.js';
import { checkGrammar, writeJson, type GenerateOptions, type Grammar } from './options.js';
import type { GenerateChunk, GenerateResult, WitnessNote } from './types.js';

/** One turn, in OpenAI's shape. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  /** The text, or OpenAI's text parts; null in an assistant turn that only calls tools. */
  content: string | null | Array<{ type: 'text'; text: string }>;
  /** The calls an assistant turn made (as a completion's `message.tool_calls` gives them). */
  tool_calls?: ChatCompletionMessageToolCall[];
  /** In a `tool` turn: the call it answers. */
  tool_call_id?: string;
  name?: string;
  /** As OpenAI's messages carry it: only null. */
  refusal?: null;
}

/** A tool the model may call (OpenAI's shape): `parameters` is the JSON Schema of its arguments object. */
export interface ChatCompletionTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

/** `'auto'` (the default with tools): the model answers or calls; `'required'`: it calls; a named function: it calls
 * that one; `'none'`: the tools are not offered. */
export type ChatCompletionToolChoice = 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } };

/** A call, as a completion reports it: `arguments` is JSON text that holds to the tool's `parameters`. */
export interface ChatCompletionMessageToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** What a chat template is rendered with besides the messages (`llm.applyChatTemplate`, `tokenizeChat`, `chatPrompt`). */
export interface ChatTemplateOptions {
  addGenerationPrompt?: boolean;
  tools?: ChatCompletionTool[];
  toolChoice?: ChatCompletionToolChoice;
  /** false: at most one call. */
  parallelToolCalls?: boolean;
  /** More template variables, as llama.cpp's `chat_template_kwargs` (`{ enable_thinking: false }`). */
  chatTemplateKwargs?: Record<string, unknown>;
}

/** How a model family writes tool calls: `hermes` (Hermes, Qwen 2.5, Qwen 3: JSON in `<tool_call>`), `qwen_xml`
 * (Qwen3-Coder, Qwen 3.5: `<function=name>` and `<parameter=p>` XML in `<tool_call>`), `gemma4` (Gemma 4:
 * `<|tool_call>call:name{...}<tool_call|>`), `llama3`, `mistral`; `generic` for templates without tools. */
export type ToolFormat = 'hermes' | 'qwen_xml' | 'gemma4' | 'llama3' | 'mistral' | 'generic';

/** `llm.chatPrompt`: what the chat API generates from. */
export interface ChatPrompt {
  ids: number[];
  /** The Lark grammar that holds the answer to the tool-call format; null when no tool is offered. */
  grammar: string | null;
  toolFormat: ToolFormat | null;
}

/** What a piece of a streamed answer settled: text, a call's start (its name), or more of a call's arguments. */
export type ToolCallDelta = { content: string } | { index: number; name: string } | { index: number; arguments: string };

/** `llm.toolCallReader`. */
export interface ToolCallReader {
  push(text: string): ToolCallDelta[];
  finish(): ToolCallDelta[];
}

/** The OpenAI request fields this engine implements (plus `top_k`, `min_p`, `repeat_penalty`, `adapters`). */
export interface ChatCompletionRequest {
  messages: ChatMessage[];
  stream?: boolean;
  /** Accepted and echoed back; the loaded model answers whatever it says. */
  model?: string;
  max_tokens?: number;
  max_completion_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  repeat_penalty?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  seed?: number;
  stop?: string | string[];
  /** LoRA adapters (`llm.loadAdapter`) to answer with, each with its scale (default 1). */
  adapters?: Array<{ id: number; scale?: number }>;
  /** Only 1 is supported. */
  n?: number;
  /** Accepted; usage is always sent, on the last chunk. */
  stream_options?: { include_usage?: boolean };
  user?: string;
  /** Parse control-token text written in the messages (`<|im_start|>`) as those tokens, as llama.cpp does: only
   * for messages you trust. By default it is text, so a message cannot end its turn or open another. */
  parse_special_tokens?: boolean;
  /** The answer's form: OpenAI's `json_schema` (`{ name, schema, strict?, description? }`: the schema always holds;
   * `strict: true` reads it as OpenAI's strict mode does, objects allowing no properties they do not list) and `json_object`, or any of `generate`'s grammars (`gbnf`, `regex`, `lark`). `text`: free. */
  response_format?: ResponseFormat;
  /** A GBNF grammar for the answer, as llama.cpp's server takes it (the same as `response_format: { type: 'gbnf' }`). */
  grammar?: string;
  /** Tools the model may call, rendered through its chat template (or, for a template without tools, described in
   * the system prompt in llama.cpp's generic form); calls are held to each tool's `parameters` schema. */
  tools?: ChatCompletionTool[];
  tool_choice?: ChatCompletionToolChoice;
  /** false: at most one call. */
  parallel_tool_calls?: boolean;
  /** More chat-template variables, as llama.cpp's server takes them (`{ enable_thinking: false }`). */
  chat_template_kwargs?: Record<string, unknown>;
  /** The conversation, in the app's words, and what else the witness log (`llm.witness`) records of this request:
   * `generate`'s `session` and `witness` options. The completion's `id` is the request's id there. */
  session?: string;
  witness?: WitnessNote | false;
}

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: { name: string; schema?: Record<string, unknown> | boolean; strict?: boolean | null; description?: string } }
  | Exclude<Grammar, { type: 'json_schema' | 'json_object' }>;

export interface ChatCompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

type FinishReason = 'stop' | 'length' | 'tool_calls';

/** A streamed call: the first chunk of each has its id, type and name; later ones more of its arguments. */
export interface ChatCompletionChunkToolCall {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: 0;
    message: { role: 'assistant'; content: string | null; tool_calls?: ChatCompletionMessageToolCall[]; refusal: null };
    finish_reason: FinishReason;
    logprobs: null;
  }>;
  usage: ChatCompletionUsage;
  /** Not OpenAI's: the sampler's seed, the request's or the fresh one drawn for a request without one. */
  seed: number;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: 0;
    delta: { role?: 'assistant'; content?: string; tool_calls?: ChatCompletionChunkToolCall[] };
    finish_reason: FinishReason | null;
    logprobs: null;
  }>;
  /** Only on the last chunk (the one with a finish_reason). */
  usage?: ChatCompletionUsage;
  /** Only on the last chunk: the sampler's seed, as `ChatCompletion.seed`. */
  seed?: number;
}

export interface Chat {
  completions: {
    create(body: ChatCompletionRequest & { stream: true }, options?: { signal?: AbortSignal }): Promise<AsyncIterable<ChatCompletionChunk>>;
    create(body: ChatCompletionRequest & { stream?: false }, options?: { signal?: AbortSignal }): Promise<ChatCompletion>;
    create(body: ChatCompletionRequest, options?: { signal?: AbortSignal }): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
  };
}

const FIELDS: Record<string, keyof GenerateOptions | null> = {
  messages: null, stream: null, model: null, n: null, stream_options: null, user: null, parse_special_tokens: null,
  response_format: null, grammar: null, tools: null, tool_choice: null, parallel_tool_calls: null, chat_template_kwargs: null,
  max_tokens: 'maxTokens', max_completion_tokens: 'maxTokens', temperature: 'temperature', top_p: 'topP',
  top_k: 'topK', min_p: 'minP', repeat_penalty: 'repeatPenalty', presence_penalty: 'presencePenalty',
  frequency_penalty: 'frequencyPenalty', seed: 'seed', stop: 'stop', adapters: 'adapters', session: 'session', witness: 'witness',
};

function generateOptions(body: ChatCompletionRequest, signal: AbortSignal | undefined): GenerateOptions {
  const options: Record<string, unknown> = { signal };
  for (const [field, value] of Object.entries(body)) {
    if (!(field in FIELDS)) throw invalid(`unsupported chat completion field '${field}'`);
    const name = FIELDS[field];
    if (name && value !== undefined && value !== null) options[name] = value;
  }
  if (body.n !== undefined && body.n !== 1) throw invalid('only n = 1 is supported');
  const grammar = answerGrammar(body);
  if (grammar) options.grammar = grammar;
  return options as GenerateOptions;
}

/** The grammar `response_format` or `grammar` asks for (at most one of them). */
function answerGrammar(body: ChatCompletionRequest): Grammar | undefined {
  const { response_format: format, grammar } = body;
  if (grammar !== undefined && grammar !== null) {
    if (format !== undefined && format !== null && format.type !== 'text') throw invalid('give response_format or grammar, not both');
    if (typeof grammar !== 'string') throw invalid('grammar must be a GBNF grammar (a string)');
    return { type: 'gbnf', grammar };
  }
  if (format === undefined || format === null) return undefined;
  if (typeof format !== 'object' || Array.isArray(format)) throw invalid('response_format must be an object with a type');
  if (format.type === 'text') {
    if (Object.keys(format).length > 1) throw invalid('response_format of type text takes no other field');
    return undefined;
  }
  if (format.type !== 'json_schema') return checkGrammar(format);
  const { type: _, json_schema: spec, ...rest } = format;
  if (Object.keys(rest).length) throw invalid(`response_format: unknown field '${Object.keys(rest)[0]}'`);
  if (typeof spec !== 'object' || spec === null) throw invalid('response_format.json_schema must be an object { name, schema }');
  const { name, schema, strict, description, ...more } = spec;
  if (Object.keys(more).length) throw invalid(`response_format.json_schema: unknown field '${Object.keys(more)[0]}'`);
  if (typeof name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(name)) {
    throw invalid('response_format.json_schema.name must be 1 to 64 letters, digits, _ or -');
  }
  if (strict !== undefined && strict !== null && typeof strict !== 'boolean') throw invalid('response_format.json_schema.strict must be a boolean');
  if (description !== undefined && typeof description !== 'string') throw invalid('response_format.json_schema.description must be a string');
  // OpenAI's default when the schema is left out: any JSON value.
  const checked = checkGrammar({ type: 'json_schema', schema: schema ?? true }) as Extract<Grammar, { type: 'json_schema' }>;
  return strict === true ? { type: 'json_schema', schema: closeObjects(checked.schema) as typeof checked.schema } : checked;
}

const SUBSCHEMA_MAPS = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];
const SUBSCHEMA_LISTS = ['anyOf', 'oneOf', 'allOf', 'prefixItems'];
const SUBSCHEMAS = ['items', 'additionalProperties', 'not', 'if', 'then', 'else', 'contains', 'propertyNames', 'unevaluatedProperties'];

/** `schema` as OpenAI's strict mode reads it: an object schema that lists its properties and says nothing of others
 * allows no others (OpenAI requires `additionalProperties: false` there; we supply it rather than refuse). */
function closeObjects(schema: unknown): unknown {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return schema;
  const out: Record<string, unknown> = { ...(schema as Record<string, unknown>) };
  if ('properties' in out && !('additionalProperties' in out) && !('unevaluatedProperties' in out)) out.additionalProperties = false;
  for (const key of SUBSCHEMA_MAPS) {
    const map = out[key];
    if (typeof map === 'object' && map !== null && !Array.isArray(map)) {
      out[key] = Object.fromEntries(Object.entries(map).map(([k, v]) => [k, closeObjects(v)]));
    }
  }
  for (const key of SUBSCHEMA_LISTS) if (Array.isArray(out[key])) out[key] = (out[key] as unknown[]).map(closeObjects);
  for (const key of SUBSCHEMAS) if (key in out) out[key] = Array.isArray(out[key]) ? (out[key] as unknown[]).map(closeObjects) : closeObjects(out[key]);
  return out;
}

function usage(r: GenerateResult): ChatCompletionUsage {
  return {
    prompt_tokens: r.usage.promptTokens,
    completion_tokens: r.usage.completionTokens,
    total_tokens: r.usage.totalTokens,
    prompt_tokens_details: { cached_tokens: r.usage.cachedTokens },
  };
}

/** A call id: OpenAI's `call_` and 24 letters and digits; Mistral's templates take exactly 9 letters and digits. */
function callId(format: ToolFormat): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = crypto.getRandomValues(new Uint8Array(format === 'mistral' ? 9 : 24));
  const id = Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('');
  return format === 'mistral' ? id : `call_${id}`;
}

/** The calls and text of an answer as deltas settle them. */
class Calls {
  readonly list: ChatCompletionMessageToolCall[] = [];
  content = '';
  readonly #format: ToolFormat;
  constructor(format: ToolFormat) {
    this.#format = format;
  }

  /** Take `deltas` in; the chunk deltas they make (content, then calls in order). */
  take(deltas: ToolCallDelta[]): Array<ChatCompletionChunk['choices'][0]['delta']> {
    const out: Array<ChatCompletionChunk['choices'][0]['delta']> = [];
    for (const d of deltas) {
      if ('content' in d) {
        this.content += d.content;
        if (d.content) out.push({ content: d.content });
      } else if ('name' in d) {
        const call: ChatCompletionMessageToolCall = { id: callId(this.#format), type: 'function', function: { name: d.name, arguments: '' } };
        this.list[d.index] = call;
        out.push({ tool_calls: [{ index: d.index, id: call.id, type: 'function', function: { name: d.name, arguments: '' } }] });
      } else {
        this.list[d.index].function.arguments += d.arguments;
        out.push({ tool_calls: [{ index: d.index, function: { arguments: d.arguments } }] });
      }
    }
    return out;
  }
}

/** What the chat API needs of its model (an `LLM`): the prompt, a generation from it, a reader of the tool calls in the
 * answer, and the model's name. */
export interface ChatHost {
  chatPrompt(messages: ChatMessage[], options: ChatTemplateOptions & { parseSpecialTokens?: boolean }): ChatPrompt;
  generate(prompt: readonly number[], options: GenerateOptions): AsyncGenerator<GenerateChunk, GenerateResult, undefined>;
  toolCallReader(format: ToolFormat, tools?: readonly ChatCompletionTool[]): ToolCallReader;
  info(): { name: string | null };
}

/** The messages of the chat requests in flight, by the options object chat hands `generate`: what the model keeps of
 * a request to learn from feedback on it later (llm.ts, the instant loop). */
export const chatMessages = new WeakMap<GenerateOptions, ChatMessage[]>();

export function createChat(llm: ChatHost): Chat {
  async function create(body: ChatCompletionRequest, { signal }: { signal?: AbortSignal } = {}) {
    if (typeof body !== 'object' || body === null) throw invalid('the request must be an object');
    const options = generateOptions(body, signal);
    const parseSpecialTokens = body.parse_special_tokens ?? false;
    if (typeof parseSpecialTokens !== 'boolean') throw invalid('parse_special_tokens must be a boolean');
    const prompt = llm.chatPrompt(body.messages, {
      tools: body.tools ?? undefined,
      toolChoice: body.tool_choice ?? undefined,
      parallelToolCalls: body.parallel_tool_calls ?? undefined,
      chatTemplateKwargs: body.chat_template_kwargs ?? undefined,
      parseSpecialTokens,
    });
    if (prompt.grammar !== null) {
      if (options.grammar) throw invalid('give tools or a response_format (or grammar), not both: tool calls have their own grammar');
      options.grammar = { type: 'lark', grammar: prompt.grammar };
    }
    const head = {
      id: `chatcmpl-${Math.random().toString(36).slice(2, 14)}`,
      created: Math.floor(Date.now() / 1000),
      model: body.model ?? llm.info().name ?? 'ruvllm',
    };
    options.requestId = head.id;
    const query = lastUserText(body.messages) ?? '';
    // The app's own note on top (checked with the other options; one that is not an object is refused there).
    if (options.witness === undefined || (typeof options.witness === 'object' && options.witness !== null)) {
      options.witness = { kind: 'chat', query: query.slice(0, 2000), ...options.witness };
    }
    chatMessages.set(options, body.messages);
    const generation = llm.generate(prompt.ids, options); // validates the options now
    const reader = prompt.toolFormat === null ? null : llm.toolCallReader(prompt.toolFormat, body.tools ?? undefined);
    const calls = new Calls(prompt.toolFormat ?? 'generic');
    const finishReason = (r: GenerateResult): FinishReason => (calls.list.length > 0 && r.finishReason === 'stop' ? 'tool_calls' : r.finishReason);
    if (!body.stream) {
      let r;
      try {
        r = await generation.next();
        while (!r.done) r = await generation.next();
        if (reader) calls.take([...reader.push(r.value.text), ...reader.finish()]);
      } finally {
        reader?.finish();
      }
      const result = r.value;
      const content = reader ? calls.content : result.text;
      const message: ChatCompletion['choices'][0]['message'] = { role: 'assistant', content: calls.list.length > 0 && content === '' ? null : content, refusal: null };
      if (calls.list.length > 0) message.tool_calls = calls.list;
      const choice = { index: 0, message, finish_reason: finishReason(result), logprobs: null } as const;
      return { ...head, object: 'chat.completion', choices: [choice], usage: usage(result), seed: result.seed } satisfies ChatCompletion;
    }
    return (async function* (): AsyncGenerator<ChatCompletionChunk> {
      const chunk = (delta: ChatCompletionChunk['choices'][0]['delta'], finish_reason: FinishReason | null): ChatCompletionChunk => ({
        ...head,
        object: 'chat.completion.chunk',
        choices: [{ index: 0, delta, finish_reason, logprobs: null }],
      });
      try {
        yield chunk({ role: 'assistant', content: '' }, null);
        let r = await generation.next();
        for (; !r.done; r = await generation.next()) {
          if (!r.value.text) continue;
          if (!reader) yield chunk({ content: r.value.text }, null);
          else for (const delta of calls.take(reader.push(r.value.text))) yield chunk(delta, null);
        }
        if (reader) for (const delta of calls.take(reader.finish())) yield chunk(delta, null);
        yield { ...chunk({}, finishReason(r.value)), usage: usage(r.value), seed: r.value.seed };
      } finally {
        reader?.finish(); // frees the reader of a stream left early
        await generation.return(undefined as never); // cancels a generation left early
      }
    })();
  }
  return { completions: { create } } as Chat;
}

const MESSAGE_FIELDS = new Set(['role', 'content', 'name', 'tool_calls', 'tool_call_id', 'refusal']);

/** A chat request as the engine takes it (crate/src/wasm/chat.rs), the messages checked; the tools and tool choice
 * are checked there. */
export function chatRequestJson(messages: ChatMessage[], options: ChatTemplateOptions): string {
  if (typeof options !== 'object' || options === null) throw invalid('options must be an object');
  if (!Array.isArray(messages)) throw invalid('messages must be an array');
  const checked = messages.map((m, i) => {
    const at = `messages[${i}]`;
    if (typeof m !== 'object' || m === null) throw invalid(`${at} must be an object`);
    const unknown = Object.keys(m).find((k) => !MESSAGE_FIELDS.has(k));
    if (unknown !== undefined) throw invalid(`${at}: unsupported field '${unknown}'`);
    if (typeof m.role !== 'string') throw invalid(`${at}.role must be a string`);
    if (m.refusal !== undefined && m.refusal !== null) throw invalid(`${at}.refusal: a refusal cannot be continued`);
    const out: Record<string, unknown> = { role: m.role, content: messageText(m, at) };
    if (m.name !== undefined) {
      if (typeof m.name !== 'string') throw invalid(`${at}.name must be a string`);
      out.name = m.name;
    }
    if (m.tool_call_id !== undefined) {
      if (typeof m.tool_call_id !== 'string') throw invalid(`${at}.tool_call_id must be a string`);
      out.tool_call_id = m.tool_call_id;
    } else if (m.role === 'tool') {
      throw invalid(`${at}: a tool message needs the tool_call_id of the call it answers`);
    }
    if (m.tool_calls !== undefined && m.tool_calls !== null) {
      if (!Array.isArray(m.tool_calls)) throw invalid(`${at}.tool_calls must be an array`);
      out.tool_calls = m.tool_calls.map((c, j) => {
        const here = `${at}.tool_calls[${j}]`;
        if (typeof c !== 'object' || c === null || (c.type !== undefined && c.type !== 'function')) throw invalid(`${here} must be {id, type: 'function', function: {name, arguments}}`);
        const f = c.function;
        if (typeof c.id !== 'string' || typeof f !== 'object' || f === null || typeof f.name !== 'string' || typeof f.arguments !== 'string') {
          throw invalid(`${here} must be {id, type: 'function', function: {name, arguments (JSON text)}}`);
        }
        return { id: c.id, function: { name: f.name, arguments: f.arguments } };
      });
    }
    return out;
  });
  const { addGenerationPrompt, tools, toolChoice, parallelToolCalls, chatTemplateKwargs } = options;
  if (addGenerationPrompt !== undefined && typeof addGenerationPrompt !== 'boolean') throw invalid('addGenerationPrompt must be a boolean');
  if (parallelToolCalls !== undefined && typeof parallelToolCalls !== 'boolean') throw invalid('parallelToolCalls must be a boolean');
  if (chatTemplateKwargs !== undefined && (typeof chatTemplateKwargs !== 'object' || chatTemplateKwargs === null || Array.isArray(chatTemplateKwargs))) {
    throw invalid('chatTemplateKwargs must be an object of template variables');
  }
  return writeJson({
    messages: checked,
    tools: tools ?? undefined,
    tool_choice: toolChoice ?? undefined,
    parallel_tool_calls: parallelToolCalls,
    chat_template_kwargs: chatTemplateKwargs,
    add_generation_prompt: addGenerationPrompt,
  }, 'the chat request');
}

/** A message's text: a string, OpenAI's text parts joined, or empty for null (an assistant turn of calls only).
 * `at` names the message in the error a malformed one gets. */
/** The text of the last user message of `messages`, or null when there is none. */
export function lastUserText(messages: ChatMessage[]): string | null {
  const last = [...messages].reverse().find((m) => m.role === 'user');
  return last ? messageText(last, 'the last user message') : null;
}

export function messageText(m: ChatMessage, at: string): string {
  const content = m.content as unknown;
  if (typeof content === 'string') return content;
  if ((content === null || content === undefined) && m.role === 'assistant') return '';
  if (Array.isArray(content)) {
    return content
      .map((part, j) => {
        if (typeof part !== 'object' || part === null || part.type !== 'text' || typeof part.text !== 'string') {
          throw invalid(`${at}.content[${j}]: only text parts ({type: 'text', text}) are supported`);
        }
        return part.text as string;
      })
      .join('');
  }
  throw invalid(`${at}.content must be a string or an array of text parts`);
}
