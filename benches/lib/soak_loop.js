// The soak's loop (benches/soak.mjs), the same in Node and in a page (benches/web/soak.html): chat turns on one model
// through the npm package, with its prefix cache in a store, a Router and a long-term Memory (on the chat model as
// embedder, in stores of their own) used on every turn; some turns aborted at a seeded random point. Every `every`
// turns it flushes the stores and calls `checkpoint(line)` with the engine's figures; the caller adds its process's.

/** xorshift64*: the same aborts for the same seed. */
function generator(seed) {
  let state = BigInt(seed) | 1n;
  return () => {
    state ^= state >> 12n;
    state ^= (state << 25n) & 0xffffffffffffffffn;
    state ^= state >> 27n;
    return Number(((state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
  };
}

/** Where a turn is aborted: while its prompt's pages are read from the store (at once), in the prefill (after 5 ms),
 * in the decode (after 3 tokens), or after its answer, while the answer's pages are being written (a new request
 * aborted at once: the turn itself answered, and counts as such). */
const WHERE = ['load', 'prefill', 'decode', 'write'];
const TOPICS = ['the sea', 'mountains', 'a city at night', 'bread', 'rain', 'a library', 'trains', 'the moon', 'gardens', 'winter'];
const ASKS = ['Tell me one fact about', 'Write a short line about', 'What is a good name for', 'Give one word for'];
const SYSTEM = { role: 'system', content: 'You are a concise assistant. Answer in one short sentence.' };
/** Turns per conversation: then a new one starts (the system prompt's pages stay shared). */
const TURNS_PER_CONVERSATION = 8;

/**
 * Run the soak. `pkg`: the package's exports; `model`: a source `LLM.load` takes; `stores`: the `store` option of the
 * prefix cache, the router and the memory (`{ prefix, router, memory }`, each with `database` where it is IndexedDB);
 * `o`: `{ turns, aborts, every, seed, maxTokens, prefixBudget, memoryBudget }`. Returns the counts.
 */
export async function soak(pkg, model, stores, o, checkpoint) {
  const { LLM, Memory, Router, RuvllmError } = pkg;
  const random = generator(o.seed);
  const aborts = new Map();
  while (aborts.size < Math.min(o.aborts, o.turns)) aborts.set(Math.floor(random() * o.turns), WHERE[Math.floor(random() * WHERE.length)]);
  const question = (i) => `${ASKS[i % ASKS.length]} ${TOPICS[Math.floor(i / ASKS.length) % TOPICS.length]} (${i}).`;

  const llm = await LLM.load(model, { prefixCache: { store: stores.prefix.store, storeBudgetBytes: o.prefixBudget } });
  const router = await Router.open({
    embedder: llm,
    routes: TOPICS.slice(0, 4).map((t) => ({ name: t.replace(/\W/g, ''), utterances: [`Tell me about ${t}`, `Something on ${t}`] })),
    threshold: 0.2,
    ...stores.router,
  });
  const memory = await Memory.open({ embedder: llm, budgetBytes: o.memoryBudget, ...stores.memory });

  const counts = { answered: 0, aborted: 0, abortedWrites: 0, failed: 0, errors: [] };
  let conversation = [SYSTEM];
  let t0 = performance.now();
  for (let i = 0; i < o.turns; i++) {
    const where = aborts.get(i);
    const controller = new AbortController();
    const user = { role: 'user', content: question(i) };
    const id = `c${Math.floor(i / TURNS_PER_CONVERSATION)}`;
    try {
      await router.route(user.content);
      const { messages } = await memory.augment([...conversation, user], { conversation: id, k: 2 });
      if (where === 'load' || where === 'prefill') setTimeout(() => controller.abort(where), where === 'load' ? 0 : 5);
      const request = { messages, stream: true, max_tokens: o.maxTokens, temperature: 0.7, seed: i };
      const stream = await llm.chat.completions.create(request, { signal: controller.signal });
      let text = '';
      let tokens = 0;
      for await (const chunk of stream) {
        text += chunk.choices[0].delta.content ?? '';
        if (++tokens === 3 && where === 'decode') controller.abort(where);
      }
      if (where === 'write') {
        const next = await llm.chat.completions.create({ messages, max_tokens: 1 }, { signal: AbortSignal.abort('write') }).catch((e) => e);
        if (!(next instanceof RuvllmError && next.code === 'E_ABORTED')) throw new Error(`expected E_ABORTED, got ${next}`);
        counts.abortedWrites++;
      }
      counts.answered++;
      const turn = [user, { role: 'assistant', content: text }];
      await memory.remember(id, turn);
      conversation = (i + 1) % TURNS_PER_CONVERSATION === 0 ? [SYSTEM] : [...conversation, ...turn];
    } catch (e) {
      if (e instanceof RuvllmError && e.code === 'E_ABORTED' && where) counts.aborted++;
      else {
        counts.failed++;
        counts.errors.push(`turn ${i}: ${e?.stack ?? e}`);
      }
    }
    if ((i + 1) % o.every === 0 || i + 1 === o.turns) {
      await llm.flushPrefixCache();
      await router.flush();
      await memory.flush();
      const info = llm.info();
      await checkpoint({
        turn: i + 1,
        wasm_mb: Math.round(info.wasmMemoryBytes / 1e5) / 10,
        prefix_cache_mb: Math.round(info.prefixCache.bytes / 1e5) / 10,
        store_error: info.prefixCache.storeError?.code ?? null,
        answered: counts.answered,
        aborted: counts.aborted,
        aborted_writes: counts.abortedWrites,
        failed: counts.failed,
        ms_per_turn: Math.round((performance.now() - t0) / o.every),
      });
      t0 = performance.now();
    }
  }
  await router.close();
  await memory.close();
  llm.dispose();
  return counts;
}
