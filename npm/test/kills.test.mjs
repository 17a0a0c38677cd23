// Two processes on one prefix-cache store at once, and processes SIGKILLed while they write what the package persists
// (issue 36): a prefix cache kept in a directory and a MicroLoRA's state. Each child loads the default model and writes in a loop, printing what it has committed; it is
// killed at seeded random moments (inside a generation, a store write, a training step). After each kill, the next
// process finds only whole records, loses nothing committed before the kill, and answers as a model without a store.
// The stores themselves under kills (every record whole, temporary files removed) are in store.test.mjs.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { MODEL_PATH, PACKAGE_DIR, seededRandom as random } from './helpers.mjs';

const KILLS = 8;
const SYSTEM = { role: 'system', content: 'You are a concise assistant. Answer in one short sentence.' };
const question = (i) => ({ role: 'user', content: `Name one thing you can see in a city at night (${i}).` });
const GREEDY = { temperature: 0, max_tokens: 4 };
const dirs = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const newDir = () => {
  dirs.push(mkdtempSync(join(tmpdir(), 'ruvllm-kills-')));
  return dirs.at(-1);
};

/** Run `code` (an ES module with `LLM`, `dir` and `model` at hand) in a child, kill it `delayMs` after its first line
 * of output, and return every line it printed. */
async function killedAfter(code, dir, delayMs) {
  const prelude = `import { LLM } from '@ruvector/ruvllm'; const dir = ${JSON.stringify(dir)}; const model = ${JSON.stringify(MODEL_PATH)};\n`;
  const p = spawn(process.execPath, ['--input-type=module', '-e', prelude + code], { cwd: PACKAGE_DIR, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  p.stderr.setEncoding('utf8').on('data', (s) => (err += s));
  const exited = new Promise((resolve) => p.on('exit', (code, signal) => resolve({ code, signal })));
  await new Promise((resolve, reject) => {
    p.stdout.setEncoding('utf8').on('data', (s) => {
      out += s;
      if (out.includes('\n')) resolve();
    });
    exited.then(({ code }) => reject(new Error(`the child exited (${code}) before it wrote: ${err}`)));
  });
  await new Promise((resolve) => setTimeout(resolve, delayMs));
  p.kill('SIGKILL');
  assert.equal((await exited).signal, 'SIGKILL', err);
  return out.split('\n').filter(Boolean);
}

test('two processes chatting on one prefix-cache store at once: each reads the pages the other wrote', { timeout: 240_000 }, async () => {
  const dir = newDir();
  // Each asks its own questions on the shared system prompt, four turns, then one the other asked; it prints JSON.
  const chatter = (mine, theirs) => `
    import { LLM } from '@ruvector/ruvllm';
    const llm = await LLM.load(${JSON.stringify(MODEL_PATH)}, { prefixCache: { store: ${JSON.stringify(dir)} } });
    const ask = async (i) => {
      const messages = [${JSON.stringify(SYSTEM)}, { role: 'user', content: '(' + i + ') Name one thing you can see in a city at night.' }];
      const r = await llm.chat.completions.create({ messages, temperature: 0, max_tokens: 4 });
      await llm.flushPrefixCache();
      return { i, content: r.choices[0].message.content, cached: r.usage.prompt_tokens_details.cached_tokens, prompt: r.usage.prompt_tokens };
    };
    const out = [];
    for (const i of ${JSON.stringify(mine)}) out.push(await ask(i));
    console.log('written'); // then waits for a line: the other process has written its pages too
    await new Promise((resolve) => process.stdin.once('data', resolve));
    out.push(await ask(${theirs}));
    console.log(JSON.stringify({ out, storeError: llm.info().prefixCache.storeError }));
    llm.dispose();
    process.exit(0);`;
  const start = (code) => {
    const p = spawn(process.execPath, ['--input-type=module', '-e', code], { cwd: PACKAGE_DIR, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stderr.on('data', (d) => (err += d));
    const written = new Promise((resolve) => p.stdout.on('data', (d) => (out += d) && out.includes('written') && resolve()));
    const result = new Promise((resolve, reject) =>
      p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out.trim().split('\n').pop())) : reject(new Error(err)))),
    );
    return { p, written, result };
  };
  const children = [start(chatter([100, 101, 102, 103], 203)), start(chatter([200, 201, 202, 203], 103))];
  await Promise.race([Promise.all(children.map((c) => c.written)), ...children.map((c) => c.result)]);
  children.forEach((c) => c.p.stdin.write('go\n'));
  const [a, b] = await Promise.all(children.map((c) => c.result));
  const plain = await LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: 0 } });
  try {
    for (const { out, storeError } of [a, b]) {
      assert.equal(storeError, null);
      for (const r of out) {
        const messages = [SYSTEM, { role: 'user', content: `(${r.i}) Name one thing you can see in a city at night.` }];
        const want = (await plain.chat.completions.create({ messages, ...GREEDY })).choices[0].message.content;
        assert.equal(r.content, want, `question ${r.i}: the same answer as without a store`);
      }
      // The last question is the other process's, its number early in the prompt: its last pages came from the
      // other's writes, whole.
      const last = out.at(-1);
      assert.equal(last.cached, Math.floor((last.prompt - 1) / 16) * 16, `question ${last.i}: every page read`);
    }
  } finally {
    plain.dispose();
  }
  assert.deepEqual(readdirSync(dir).filter((n) => !n.endsWith('.rec')), [], 'only records are left');
});

test(`a prefix cache's writer SIGKILLed at ${KILLS} points: the next process reads every page committed, answers the same`, { timeout: 240_000 }, async () => {
  const dir = newDir();
  const plain = await LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: 0 } });
  const answer = async (messages) => (await plain.chat.completions.create({ messages, ...GREEDY })).choices[0].message;
  // Turns on a shared system prompt, each flushed (its pages committed) before the child says so.
  const writer = (first) => `
    const llm = await LLM.load(model, { prefixCache: { store: dir } });
    for (let i = ${first}; ; i++) {
      const messages = [${JSON.stringify(SYSTEM)}, { role: 'user', content: 'Name one thing you can see in a city at night (' + i + ').' }];
      await llm.chat.completions.create({ messages, temperature: 0, max_tokens: 4 });
      await llm.flushPrefixCache();
      console.log(i);
    }`;
  const next = random(36);
  let first = 0;
  try {
    for (let kill = 0; kill < KILLS; kill++) {
      const committed = (await killedAfter(writer(first), dir, next() * 600)).map(Number);
      first = committed.at(-1) + 1;
      // The next process: the last committed turn's pages are there and whole, and reused exactly.
      const messages = [SYSTEM, question(committed.at(-1))];
      const reader = await LLM.load(MODEL_PATH, { prefixCache: { store: dir } });
      try {
        const r = await reader.chat.completions.create({ messages, ...GREEDY });
        assert.deepEqual(r.choices[0].message, await answer(messages), `kill ${kill}: the same answer as without a store`);
        const pages = Math.floor((reader.tokenizeChat(messages).length - 1) / 16) * 16;
        assert.equal(r.usage.prompt_tokens_details.cached_tokens, pages, `kill ${kill}: every committed page read`);
        assert.equal(reader.info().prefixCache.storeError, null);
      } finally {
        reader.dispose();
      }
      assert.deepEqual(readdirSync(dir).filter((n) => !n.endsWith('.rec')), [], `kill ${kill}: only records are left`);
    }
  } finally {
    plain.dispose();
  }
});

test(`a MicroLoRA SIGKILLed at ${KILLS} points while it trains and saves: it reopens with every step it reported`, { timeout: 240_000 }, async () => {
  const dir = newDir();
  const trainer = `
    const llm = await LLM.load(model);
    const lora = await llm.microLora({ store: dir, name: 'facts', rank: 2 });
    for (;;) {
      const r = await llm.feedback({ messages: [{ role: 'user', content: 'What is the capital of France?' }], response: 'Paris.', accepted: true });
      console.log(r.steps);
    }`;
  const next = random(37);
  const llm = await LLM.load(MODEL_PATH);
  try {
    for (let kill = 0; kill < KILLS; kill++) {
      const steps = (await killedAfter(trainer, dir, next() * 800)).map(Number);
      // Opened again: not refused as damaged, and at least at the last step it reported (each step is saved before).
      const lora = await llm.microLora({ store: dir, name: 'facts' });
      assert.ok(lora.info().steps >= steps.at(-1), `kill ${kill}: ${lora.info().steps} steps stored, ${steps.at(-1)} reported`);
      assert.deepEqual(readdirSync(dir).filter((n) => !n.endsWith('.rec')), [], `kill ${kill}: only records are left`);
    }
  } finally {
    llm.dispose();
  }
});
