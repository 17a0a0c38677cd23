// Structured output (issue 37) on JSONSchemaBench's real-world schemas, through the package (wasm32, Node, one
// thread): what the grammar's token masks cost per generated token beside the model's decode step, the time to the
// first mask of a new schema, and coverage and compliance in JSONSchemaBench's terms, split by split.
//
//   git clone https://github.com/guidance-ai/jsonschemabench
//   node benches/grammar.mjs --data jsonschemabench [--per-split 20] [--seed 37] [--max-tokens 256]
//        [--splits Github_easy,...] [--schema-chars 400] [--repeat-penalty 1] [--model M]
//
// Data: the checkout's data/<split>/ hold one JSON Schema per file (`--data` takes the checkout or its data/).
// Per split, the file names in order, shuffled with mulberry32 seeded `--seed`, the first `--per-split` of them.
// Each schema: a greedy generation (temperature 0) constrained by { type: 'json_schema', schema }, from a chat
// message asking for an instance of the schema (its compact text, cut at `--schema-chars`) in the model's chat
// template (llm.tokenizeChat).
//
//   coverage    share of the sample the engine compiles (not E_GRAMMAR): JSONSchemaBench's "declared coverage"
//   finished    share of the compiled whose output ended with 'stop' (not cut at --max-tokens)
//   compliance  share of the finished outputs that parse and validate against their schema (ajv)
//   empirical   compiled AND finished AND validated, over the whole sample: JSONSchemaBench's "empirical coverage"
//
// Validation: ajv, `strict: false`, ajv-formats, the class by the schema's $schema: draft-07 and draft-06 Ajv,
// 2019-09 Ajv2019, 2020-12 Ajv2020, draft-04 ajv-draft-04 where it can be resolved (npm/node_modules,
// benches/node_modules, or NODE_PATH: `npm install --prefix /tmp/ajv04 ajv-draft-04@1.0.0 ajv@8.20.0
// ajv-formats@3.0.1` and NODE_PATH=/tmp/ajv04/node_modules), else those outputs count as unchecked; no $schema:
// draft-07, else draft-04. An output ajv cannot check (no class for its draft, or ajv cannot compile the schema) is
// unchecked: out of compliance's denominator and not counted as valid in the empirical coverage.
//
// Progress (one JSON line per schema) goes to stderr; the tables and one summary JSON line to stdout.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, homedir, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const dataArg = opt('--data');
if (!dataArg) throw new Error('--data DIR is required: a checkout of github.com/guidance-ai/jsonschemabench (or its data/)');
const dataDir = statSafe(join(dataArg, 'data'))?.isDirectory() ? join(dataArg, 'data') : dataArg;
const perSplit = Number(opt('--per-split', 20));
const seed = Number(opt('--seed', 37)); // 37: the issue's number, as in npm/test/grammar.test.mjs
const maxTokens = Number(opt('--max-tokens', 256));
const schemaChars = Number(opt('--schema-chars', 400));
// 1 (off): plain greedy decoding. Above 1, greedy on logits with llama.cpp's repeat penalty (the last 64 tokens): a
// way to see how many outputs cut at --max-tokens are the small model repeating itself.
const repeatPenalty = Number(opt('--repeat-penalty', 1));
const splits = opt('--splits', 'Github_easy,Github_medium,Github_hard,Glaiveai2K,Kubernetes,Snowplow').split(',');
const model =
  opt('--model') ??
  process.env.RUVLLM_MODEL ??
  join(process.env.RUVLLM_CACHE ?? join(homedir(), '.cache', 'ruvllm'), 'SmolLM2-135M-Instruct.Q4_1.gguf');

function statSafe(path) {
  try {
    return statSync(path);
  } catch {
    return null;
  }
}

/** mulberry32, as npm/test/helpers.mjs (not imported: it reads the shared reference files on import). */
function seededRandom(s) {
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function sample(split) {
  const files = readdirSync(join(dataDir, split)).filter((f) => f.endsWith('.json')).sort();
  const random = seededRandom(seed);
  for (let i = files.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [files[i], files[j]] = [files[j], files[i]];
  }
  return { total: files.length, files: files.slice(0, perSplit) };
}

// ---- ajv, by draft ----------------------------------------------------------------------------------------------
const npmRequire = createRequire(join(root, 'npm', 'package.json'));
const { default: Ajv } = await import(pathToFileURL(npmRequire.resolve('ajv')).href);
const { default: Ajv2019 } = await import(pathToFileURL(npmRequire.resolve('ajv/dist/2019')).href);
const { default: Ajv2020 } = await import(pathToFileURL(npmRequire.resolve('ajv/dist/2020')).href);
const { default: addFormats } = await import(pathToFileURL(npmRequire.resolve('ajv-formats')).href);
const draft06 = npmRequire('ajv/dist/refs/json-schema-draft-06.json');

// ajv-draft-04 and the ajv-formats beside it (they must share one ajv: its code generator checks `instanceof`).
async function findDraft04() {
  for (const base of [join(root, 'npm', 'package.json'), join(root, 'benches', 'package.json')]) {
    let path;
    try {
      path = createRequire(base).resolve('ajv-draft-04');
    } catch {
      continue;
    }
    const near = createRequire(path);
    const { default: cls } = await import(pathToFileURL(path).href);
    const { default: formats } = await import(pathToFileURL(near.resolve('ajv-formats')).href);
    return { cls, formats, path };
  }
  return null;
}
const ajvDraft04 = await findDraft04();

// unicodeRegExp off: schemas' patterns are ECMA-262 regexes, many with escapes (`\:`, `\-`) that the u flag refuses.
const AJV_OPTIONS = { strict: false, logger: false, allErrors: false, unicodeRegExp: false };

function newAjv(draft) {
  let ajv;
  if (draft === 'draft-07' || draft === 'draft-06') {
    ajv = new Ajv(AJV_OPTIONS);
    ajv.addMetaSchema(draft06);
    addFormats(ajv);
  } else if (draft === '2019-09') {
    ajv = new Ajv2019(AJV_OPTIONS);
    addFormats(ajv);
  } else if (draft === '2020-12') {
    ajv = new Ajv2020(AJV_OPTIONS);
    addFormats(ajv);
  } else if (draft === 'draft-04' && ajvDraft04) {
    ajv = new ajvDraft04.cls(AJV_OPTIONS);
    ajvDraft04.formats(ajv);
  }
  return ajv;
}

const DRAFTS = [
  [/json-schema\.org\/draft-04\/schema$/, 'draft-04'],
  [/json-schema\.org\/draft-06\/schema$/, 'draft-06'],
  [/json-schema\.org\/draft-07\/schema$/, 'draft-07'],
  [/json-schema\.org\/draft\/2019-09\/schema$/, '2019-09'],
  [/json-schema\.org\/draft\/2020-12\/schema$/, '2020-12'],
];

/** A validator for `schema` by its $schema, or the reason there is none. A new Ajv per schema: ids may repeat.
 * Without $schema: draft-07, then draft-04 where draft-07 refuses it (schemas written for draft-04 name
 * themselves with `id`, which draft-07 calls `$id`). */
function validatorFor(schema) {
  const declared = typeof schema === 'object' && schema !== null ? schema.$schema : undefined;
  const uri = typeof declared === 'string' ? declared.replace(/#$/, '') : '';
  const tries = uri === '' ? ['draft-07', 'draft-04'] : DRAFTS.filter(([re]) => re.test(uri)).map(([, d]) => d);
  if (tries.length === 0) return { draft: String(declared), error: `no ajv class for $schema ${declared}` };
  let error;
  for (const draft of tries) {
    const ajv = newAjv(draft);
    const name = uri === '' ? `none (${draft})` : draft;
    if (!ajv) {
      error = { draft: name, error: 'ajv-draft-04 is not installed' };
      continue;
    }
    try {
      return { draft: name, validate: ajv.compile(schema), ajv };
    } catch (e) {
      error = { draft: name, error: `ajv cannot compile the schema: ${e.message}` };
    }
  }
  return error;
}

// ---- the model --------------------------------------------------------------------------------------------------
const { LLM, RuvllmError } = await import(pathToFileURL(join(root, 'npm', 'dist', 'node.js')).href);
const llm = await LLM.load(model, { threads: 1, backend: 'cpu' });
const info = llm.info();

const quantile = (xs, q) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const median = (xs) => quantile(xs, 0.5);
const sum = (xs) => xs.reduce((a, b) => a + b, 0);
const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');
const pct = (n, d) => (d > 0 ? `${((100 * n) / d).toFixed(0)}%` : '-');

/** Run a generation to its end: the result, or the error and how many chunks came before it. */
async function run(prompt, options) {
  const it = llm.generate(prompt, options);
  let chunks = 0;
  try {
    for (;;) {
      const r = await it.next();
      if (r.done) return { result: r.value, chunks };
      chunks++;
    }
  } catch (error) {
    return { error, chunks };
  }
}

// The model's decode step without a grammar: greedy, end-of-generation ignored, 64 tokens, median of 3.
const plainPrompt = llm.tokenizeChat([{ role: 'user', content: 'Describe a lighthouse on a rocky coast at night.' }]);
const plainSteps = [];
for (let i = 0; i < 3; i++) {
  const { result, error } = await run(plainPrompt, { temperature: 0, maxTokens: 64, ignoreEos: true });
  if (error) throw error;
  plainSteps.push(result.timings.decodeMs / (result.usage.completionTokens - 1));
}
const decodeStepMs = median(plainSteps);

// The first grammar on a loaded model also builds the grammar compiler over the vocabulary; timed apart, so that
// each schema's compile below is what a new schema costs.
const first = await run(plainPrompt, { temperature: 0, maxTokens: 1, grammar: { type: 'json_object' } });
if (first.error) throw first.error;
const firstGrammarMs = first.result.timings.grammarCompileMs;

function promptFor(schema) {
  let text = JSON.stringify(schema);
  if (text.length > schemaChars) text = `${text.slice(0, schemaChars)} ... (cut)`;
  const content =
    'Write one JSON value that is valid against the JSON Schema below. Reply with the JSON only.\n\n' +
    `JSON Schema:\n${text}`;
  return llm.tokenizeChat([{ role: 'user', content }]);
}

const rows = [];
const all = [];
const loadStart = loadavg()[0];
const started = performance.now();
for (const split of splits) {
  const { total, files } = sample(split);
  const records = [];
  for (const file of files) {
    const schema = JSON.parse(readFileSync(join(dataDir, split, file), 'utf8'));
    const rec = { split, file, bytes: JSON.stringify(schema).length };
    const t0 = performance.now();
    const { result, error, chunks } = await run(promptFor(schema), {
      temperature: 0,
      repeatPenalty,
      maxTokens,
      grammar: { type: 'json_schema', schema },
    });
    rec.wallMs = Math.round(performance.now() - t0);
    if (error) {
      if (!(error instanceof RuvllmError)) throw error;
      // Before any token: the schema did not compile. After tokens: the grammar failed mid-generation.
      rec.status = error.code === 'E_GRAMMAR' && chunks === 0 ? 'not_compiled' : 'error';
      rec.error = `${error.code}: ${error.message.slice(0, 200)}`;
    } else {
      const { usage, timings, finishReason, text } = result;
      Object.assign(rec, {
        finishReason,
        completionTokens: usage.completionTokens,
        forcedTokens: usage.forcedTokens,
        promptTokens: usage.promptTokens,
        compileMs: timings.grammarCompileMs,
        grammarMs: timings.grammarMs,
        decodeMs: timings.decodeMs,
      });
      rec.status = finishReason === 'stop' ? 'finished' : 'length';
      if (rec.status === 'length') rec.tail = text.slice(-120);
      if (rec.status === 'finished') {
        const v = validatorFor(schema);
        rec.draft = v.draft;
        let value;
        try {
          value = JSON.parse(text);
        } catch (e) {
          rec.valid = false;
          rec.why = `not JSON: ${e.message}`;
        }
        if (rec.why === undefined) {
          if (v.error) {
            rec.valid = null;
            rec.why = v.error.slice(0, 200);
          } else {
            rec.valid = v.validate(value);
            if (!rec.valid) rec.why = v.ajv.errorsText(v.validate.errors).slice(0, 200);
          }
        }
        if (rec.valid === false) rec.text = text.slice(0, 300);
      }
    }
    console.error(JSON.stringify(rec));
    records.push(rec);
  }
  all.push(...records);
  const compiled = records.filter((r) => r.status !== 'not_compiled');
  const finished = records.filter((r) => r.status === 'finished');
  const checked = finished.filter((r) => r.valid !== null);
  const valid = finished.filter((r) => r.valid === true);
  rows.push({
    split,
    total,
    n: records.length,
    compiled: compiled.length,
    errors: records.filter((r) => r.status === 'error').length,
    finished: finished.length,
    checked: checked.length,
    valid: valid.length,
  });
}
const seconds = (performance.now() - started) / 1000;
const loadEnd = loadavg()[0];

// ---- the tables -------------------------------------------------------------------------------------------------
const gen = all.filter((r) => r.completionTokens > 0);
const maskPerToken = gen.map((r) => r.grammarMs / r.completionTokens);
const aggMaskMs = sum(gen.map((r) => r.grammarMs)) / sum(gen.map((r) => r.completionTokens));
const sampled = sum(gen.map((r) => r.completionTokens - r.forcedTokens));
const compiles = all.filter((r) => r.compileMs !== undefined).map((r) => r.compileMs);
const inGrammarSteps = gen.filter((r) => r.completionTokens > 1).map((r) => r.decodeMs / (r.completionTokens - 1));

const out = [];
out.push(
  `# Structured output on JSONSchemaBench: ${info.build}, ${info.threads} thread, Node ${process.versions.node}, ` +
    `${cpus().length} cores; seed ${seed}, ${perSplit} schemas per split, greedy` +
    `${repeatPenalty !== 1 ? ` (repeat penalty ${repeatPenalty})` : ''}, max_tokens ${maxTokens}, ` +
    `schema text cut at ${schemaChars} chars; ${fmt(seconds, 0)} s, 1-min load average ${fmt(loadStart)} -> ${fmt(loadEnd)}`,
  '',
  '## The mask per generated token (one wasm thread)',
  '',
  '| measure | value |',
  '|---|---|',
  `| grammar per generated token (sum grammarMs / sum completionTokens, ${gen.length} generations, ${sum(gen.map((r) => r.completionTokens))} tokens, ${sum(gen.map((r) => r.forcedTokens))} forced) | ${fmt(aggMaskMs, 3)} ms |`,
  `| the same per generation: median / p90 / max | ${fmt(median(maskPerToken), 3)} / ${fmt(quantile(maskPerToken, 0.9), 3)} / ${fmt(Math.max(...maskPerToken), 3)} ms |`,
  `| grammar per sampled token (masks are computed for these only) | ${fmt(sum(gen.map((r) => r.grammarMs)) / sampled, 3)} ms |`,
  `| decode step without a grammar (decodeMs / (completionTokens - 1), 64 tokens, median of 3) | ${fmt(decodeStepMs, 2)} ms |`,
  `| **grammar / decode step** (goal <= 10%) | **${fmt((100 * aggMaskMs) / decodeStepMs, 1)}%** |`,
  `| decode step in the grammar runs (median; forced tokens are evaluated together) | ${fmt(median(inGrammarSteps), 2)} ms |`,
  `| time to first mask of a new schema (grammarCompileMs, ${compiles.length} compiled): median / p90 / max | ${fmt(median(compiles), 1)} / ${fmt(quantile(compiles, 0.9), 1)} / ${fmt(Math.max(...compiles), 1)} ms |`,
  `| the first grammar on a loaded model (json_object; builds the compiler over the vocabulary) | ${fmt(firstGrammarMs, 1)} ms |`,
  '',
  '## Coverage and compliance per split',
  '',
  '| split | sample | coverage (compiled) | finished | compliance (valid / finished, checked) | empirical coverage | unchecked | errors mid-generation |',
  '|---|---|---|---|---|---|---|---|',
);
const line = (name, r) =>
  `| ${name} | ${r.n}${r.total ? ` of ${r.total}` : ''} | ${r.compiled} (${pct(r.compiled, r.n)}) | ${r.finished} (${pct(r.finished, r.compiled)}) | ` +
  `${r.valid} / ${r.checked} (${pct(r.valid, r.checked)}) | ${r.valid} (${pct(r.valid, r.n)}) | ${r.finished - r.checked} | ${r.errors} |`;
for (const r of rows) out.push(line(r.split, r));
const tot = Object.fromEntries(['n', 'compiled', 'errors', 'finished', 'checked', 'valid'].map((k) => [k, sum(rows.map((r) => r[k]))]));
out.push(line('**all**', tot));
const invalid = all.filter((r) => r.valid === false);
const unchecked = all.filter((r) => r.valid === null);
const notCompiled = all.filter((r) => r.status === 'not_compiled');
const lengths = all.filter((r) => r.status === 'length');
out.push('');
if (notCompiled.length) {
  out.push('Not compiled (E_GRAMMAR):');
  for (const r of notCompiled) out.push(`  ${r.split}/${r.file}: ${r.error}`);
}
if (invalid.length) {
  out.push('Finished but invalid:');
  for (const r of invalid) out.push(`  ${r.split}/${r.file} (${r.draft}): ${r.why}`);
}
if (unchecked.length) {
  out.push('Unchecked:');
  for (const r of unchecked) out.push(`  ${r.split}/${r.file} (${r.draft}): ${r.why}`);
}
if (lengths.length) out.push(`Cut at max_tokens: ${lengths.map((r) => `${r.split}/${r.file}`).join(', ')}`);
for (const r of all.filter((x) => x.status === 'error')) out.push(`Error mid-generation: ${r.split}/${r.file}: ${r.error}`);
out.push('');
console.log(out.join('\n'));
console.log(
  JSON.stringify({
    bench: 'grammar',
    runtime: info.build,
    threads: info.threads,
    node: process.versions.node,
    seed,
    per_split: perSplit,
    max_tokens: maxTokens,
    repeat_penalty: repeatPenalty,
    seconds: Math.round(seconds),
    load_start: loadStart,
    load_end: loadEnd,
    ajv_draft_04: ajvDraft04 ? ajvDraft04.path : null,
    grammar_ms_per_token: aggMaskMs,
    decode_step_ms: decodeStepMs,
    ratio: aggMaskMs / decodeStepMs,
    compile_ms_p50: median(compiles),
    compile_ms_p90: quantile(compiles, 0.9),
    compile_ms_max: Math.max(...compiles),
    first_grammar_ms: firstGrammarMs,
    splits: rows,
  }),
);
llm.dispose();
