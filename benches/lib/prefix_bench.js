// The prefix-cache measurements, shared by the Node drivers (prefix_cache.mjs, long_conversation.mjs) and the
// Chromium page (web/prefix_cache.html): a plain ES module without Node imports. Each function takes the package's
// `LLM` class or a loaded model, so the same code runs wherever the package runs.

const now = () => performance.now();

/**
 * Time to the first token of `prompt` (token ids or text), greedy, one token: the milliseconds from the call to the
 * token, the token, how many prompt tokens came from a cache, and where the time went (the engine's prefill of the
 * uncached tail, its restore of cached keys and values, the store read before the prompt when there was one).
 * `maxTokens: 0` times the same without a token: the prompt made ready in the cache.
 */
export async function firstToken(llm, prompt, { maxTokens = 1 } = {}) {
  const before = llm.info().prefixCache?.lastLoad ?? null;
  const t0 = now();
  const r = await llm.complete(prompt, { temperature: 0, maxTokens });
  const ms = now() - t0;
  const cache = llm.info().prefixCache;
  const load = cache?.lastLoad && cache.lastLoad !== before ? cache.lastLoad : null;
  return {
    ms,
    id: r.ids[0],
    prompt_tokens: r.usage.promptTokens,
    cached_tokens: r.usage.cachedTokens,
    prefill_ms: r.timings.prefillMs,
    restore_ms: r.timings.restoreMs,
    store_read_ms: load?.readMs ?? null,
    store_load_ms: load?.loadMs ?? null,
    store_records: load?.records ?? 0,
    store_bytes: load?.bytes ?? 0,
    cache_bytes: cache?.bytes ?? null,
  };
}

/** `prefixTokens` tokens of `text` (no BOS), then a short question: the prompt of the prefix benchmark. */
export function prefixPrompt(llm, text, prefixTokens) {
  const prefix = llm.tokenize(text).slice(0, prefixTokens);
  if (prefix.length < prefixTokens) throw new Error(`the text has only ${prefix.length} tokens`);
  return [...prefix, ...llm.tokenize(' Question: what comes next?')];
}

/**
 * The prefix cache in memory: the prompt cold (cache cleared), then again after `reset()` (the conversation forgotten,
 * the model's prefix cache kept, so only the cache can supply the prefix). Leaves the prefix in the cache (and in the
 * store, if the model has one).
 */
export async function coldThenWarm(llm, prompt) {
  await llm.reset();
  await llm.clearPrefixCache();
  const cold = await firstToken(llm, prompt);
  await llm.reset();
  const warm = await firstToken(llm, prompt);
  await llm.flushPrefixCache();
  return { cold, warm };
}

/**
 * A conversation of about `tokens` tokens as chat messages: a system prompt, then user and assistant turns cut from
 * `text`, ending with a user turn. `tokens` in the result: its prompt's length (the model's chat template, with the
 * generation prompt).
 */
export function conversation(llm, text, tokens, turnTokens = 200) {
  const words = text.split(/\s+/).filter(Boolean);
  const messages = [{ role: 'system', content: 'You are a helpful assistant. Answer briefly and precisely.' }];
  let at = 0;
  const take = (n) => {
    const out = [];
    while (out.length < n) {
      out.push(words[at % words.length]);
      at++;
    }
    return out.join(' ');
  };
  for (;;) {
    const count = llm.tokenize(llm.applyChatTemplate(messages), { prompt: true }).length;
    if (count >= tokens && messages.at(-1).role === 'user') return { messages, tokens: count };
    // Words are about 1.3 tokens of this text; the last turn is cut to land near `tokens`.
    const n = Math.max(8, Math.min(turnTokens, Math.floor((tokens - count) / 1.3)));
    messages.push({ role: messages.length % 2 ? 'user' : 'assistant', content: take(n) });
  }
}

/** Load options of the long-conversation bench: one thread, the CPU engine, its context, the cache's budget, and
 * `kvCache` passed through as given (an option of the two-tier KV cache; a build without it ignores it). */
export function longLoadOptions(cfg, store) {
  return {
    threads: cfg.threads,
    backend: 'cpu',
    contextSize: cfg.contextSize,
    prefixCache: { store, budgetBytes: cfg.budgetBytes },
    ...(cfg.kvCache !== undefined && { kvCache: cfg.kvCache }),
  };
}

/**
 * The first visit of the long-conversation bench, in a fresh page or process: a conversation of `cfg.tokens` tokens
 * is evaluated cold (the store cleared first) and answered in `cfg.answerTokens` greedy tokens; its pages are written to
 * the store before this returns. What the reopened conversation needs: its messages and the answer.
 */
export async function firstVisit(LLM, modelUrl, cfg, store) {
  const llm = await LLM.load(modelUrl, longLoadOptions(cfg, store));
  try {
    await llm.clearPrefixCache();
    const conv = conversation(llm, cfg.text, cfg.tokens);
    const t0 = now();
    let ttft = null;
    const it = llm.generate(llm.applyChatTemplate(conv.messages), { temperature: 0, maxTokens: cfg.answerTokens });
    let r;
    for (;;) {
      r = await it.next();
      if (r.done) break;
      ttft ??= now() - t0;
    }
    const t1 = now();
    await llm.flushPrefixCache();
    const info = llm.info().prefixCache;
    return {
      messages: [...conv.messages, { role: 'assistant', content: r.value.text }],
      prompt_tokens: r.value.usage.promptTokens,
      cold_ttft_ms: ttft,
      store_write_ms: now() - t1,
      cache_bytes: info.bytes,
      stored_bytes: info.storedBytes,
      store_error: info.storeError,
    };
  } finally {
    llm.dispose();
  }
}

/**
 * The conversation reopened in a new page or process: the next question, its first token timed (`firstToken`).
 * With `cfg.ready`, the page first makes the conversation ready (`maxTokens: 0`, as it would while its user types:
 * the store read, the restore and the last partial page's prefill), timed as `ready`; the question then evaluates
 * only its own tokens.
 */
export async function reopen(LLM, modelUrl, cfg, store, messages) {
  const llm = await LLM.load(modelUrl, longLoadOptions(cfg, store));
  try {
    const ready = cfg.ready ? await firstToken(llm, llm.applyChatTemplate(messages, { addGenerationPrompt: false }), { maxTokens: 0 }) : null;
    const next = [...messages, { role: 'user', content: 'Thank you. In one sentence, what was this conversation about?' }];
    return { ...(await firstToken(llm, llm.applyChatTemplate(next))), ready };
  } finally {
    llm.dispose();
  }
}
