#!/usr/bin/env bash
# Fuzz the GGUF parser, model loading, generation, the tokenizers, chat templates, persisted prefix-cache pages,
# saved conversations, persisted HNSW indexes, LoRA adapters, saved MicroLoRA states and request grammars (cargo-fuzz, libFuzzer;
# the targets are in fuzz/fuzz_targets/).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 seconds, every target)
#
# The seed corpus is built into target/fuzz-corpus/<target>/ (and grows there from run to run). A crash, a
# timeout (-timeout: one input running over 10 s) or running out of memory (-rss_limit_mb, and any single
# allocation over it) is saved in fuzz/artifacts/<target>/ and fails the script. Reproduce one with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# minimize it with `cargo +nightly fuzz tmin <target> <file>`, and make it a test in tests/rust/bad_input.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift $(($# > 0 ? 1 : 0))
all=(gguf_parse model_load gguf_structured load_chat_generate tokenizer chat_template kv_record session_state hnsw_index
  lora_adapter grammar)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${all[@]}"); fi
NIGHTLY=${RUVLLM_NIGHTLY:-nightly} # libFuzzer's instrumentation needs nightly (scripts/setup.sh installs it)

if ! cargo +"$NIGHTLY" fuzz --version >/dev/null 2>&1; then
  echo "== fuzz: cargo install cargo-fuzz" >&2
  cargo install cargo-fuzz --locked >&2
fi

export RUVLLM_MODEL=${RUVLLM_MODEL:-$(scripts/fetch-model.sh)}
export RUVLLM_EMBED_MODEL=${RUVLLM_EMBED_MODEL:-$(scripts/fetch-embed-model.sh)}
export RUVLLM_FIXTURES=${RUVLLM_FIXTURES:-$PWD/target/fixtures}
export RUVLLM_LLAMA_VOCABS=${RUVLLM_LLAMA_VOCABS:-$(scripts/fetch-llama-cpp.sh vocabs)}
if [ ! -f "$RUVLLM_FIXTURES/tiny-phi3.gguf" ] && [ -x .venv/bin/python ]; then
  .venv/bin/python tests/fixtures/make_tiny_models.py "$RUVLLM_FIXTURES" >&2
fi
if [ ! -f "$RUVLLM_FIXTURES/lora.json" ] && [ -x .venv/bin/python ]; then
  .venv/bin/python tests/fixtures/make_lora_adapters.py "$RUVLLM_FIXTURES" >&2
fi

# Seeds. The tiny and micro models load and generate (the micro ones, ~130 KB, run faster: a model
# target's time goes to instrumented matmuls); the default model (98 MB, a 1.8 MB header of which the vocabulary
# is nearly all) would make every execution slow, so only its first 64 KiB go in: the real file's metadata
# layout, cut inside the vocabulary. libFuzzer takes -max_len from the largest seed (the tiny models, ~400 KB).
corpus=target/fuzz-corpus
seeds=target/fuzz-seeds
mkdir -p "$seeds"
head -c 65536 "$RUVLLM_MODEL" >"$seeds/smollm2-first-64k.gguf"
# The same for the bert encoder (all-MiniLM-L6-v2 F16): its metadata and the start of its WordPiece vocabulary.
head -c 65536 "$RUVLLM_EMBED_MODEL" >"$seeds/minilm-first-64k.gguf"
# Gemma 3 270M's metadata and the start of its 262,144-piece vocabulary, the same way.
head -c 65536 "$(scripts/fetch-model.sh gemma3)" >"$seeds/gemma3-first-64k.gguf"
# The tiny mixture of experts (700 KB, past the others' largest) as its first 64 KiB: the expert keys and 3-D tensors.
head -c 65536 "$RUVLLM_FIXTURES/tiny-qwen3moe.gguf" >"$seeds/qwen3moe-first-64k.gguf"
fixtures=("$RUVLLM_FIXTURES"/{tiny,micro}-{llama-spm,qwen2}.gguf "$RUVLLM_FIXTURES"/tiny-{qwen3,llama3,phi3,smollm3}.gguf)
# A split model's shards laid end to end, as gguf_parse cuts its input into shards (before each "GGUF").
cat "$RUVLLM_FIXTURES"/tiny-llama3-split-0000{1,2,3}-of-00003.gguf >"$seeds/tiny-llama3-split-end-to-end.gguf" || true
# The tokenizer target reads: a vocabulary number, then token ids (a 0 byte: none), then the text.
i=0
for text in "Hello, world! 123 héllo wörld" $'<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n' \
  "東京は日本の首都です。 서울 北京 😀🎉" $'  tabs\tand\n\nnewlines   ' "<s> </s> <unk> <0x41> ▁x [PAD0]"; do
  for vocab in 0 1 2 3 4; do
    printf "\\x$vocab\\x00%s" "$text" >"$seeds/tokenizer-$i-$vocab"
  done
  i=$((i + 1))
done
seed() { # seed TARGET FILE...: copy the files that exist into the target's corpus
  local t=$1
  shift
  mkdir -p "$corpus/$t"
  for f in "$@"; do
    if [ -f "$f" ]; then cp "$f" "$corpus/$t/seed-$(basename "$f")"; else echo "fuzz: no seed $f" >&2; fi
  done
}
seed gguf_parse "${fixtures[@]}" "$seeds/tiny-llama3-split-end-to-end.gguf" "$seeds/smollm2-first-64k.gguf" "$seeds/minilm-first-64k.gguf" "$seeds/gemma3-first-64k.gguf" "$seeds/qwen3moe-first-64k.gguf"
seed model_load "${fixtures[@]}" "$seeds/smollm2-first-64k.gguf" "$seeds/minilm-first-64k.gguf" "$seeds/gemma3-first-64k.gguf" "$seeds/qwen3moe-first-64k.gguf"
seed load_chat_generate "${fixtures[@]}"
seed gguf_structured
seed tokenizer "$seeds"/tokenizer-*
seed chat_template fuzz/seeds/chat_template/* tests/fixtures/templates/*.jinja
seed kv_record fuzz/seeds/kv_record/*
seed session_state fuzz/seeds/session_state/*
# The tiny models' adapters, good and bad (make_lora_adapters.py), which lora_adapter reads for tiny-llama-spm, and
# two edited MicroLoRA states (an input starting with M).
seed lora_adapter "$RUVLLM_FIXTURES"/lora-{llama,phi3,bad}-*.gguf fuzz/seeds/lora_adapter/*
# hnsw_index builds its own valid records from the input's first bytes: it needs no seeds.
seed hnsw_index
# A kind byte (0 JSON Schema, 1 GBNF, 2 regex, 3 Lark), then the grammar's text.
seed grammar fuzz/seeds/grammar/*

echo "== fuzz: build (cargo-fuzz, $NIGHTLY)"
# cargo-fuzz has no --locked: check that fuzz/Cargo.lock needs no change first.
cargo +"$NIGHTLY" metadata --locked --manifest-path fuzz/Cargo.toml --format-version 1 >/dev/null
cargo +"$NIGHTLY" fuzz build

declare -A execs status
failed=0
for t in "${targets[@]}"; do
  log=target/fuzz-$t.log
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
  case $t in
    chat_template) args+=(-dict=fuzz/chat_template.dict) ;;
    # Descriptions need a few KB to hold a vocabulary and tensor bytes: no slow growth from libFuzzer's 4-byte start.
    gguf_structured) args+=(-max_len=4096 -len_control=0) ;;
  esac
  asan=${ASAN_OPTIONS:-}
  # libFuzzer keeps every input that was ever new: past 256 MB (the model targets' inputs are ~400 KB), keep a
  # smallest set with the same coverage.
  if [ "$(du -sm "$corpus/$t" | cut -f1)" -gt 256 ]; then
    echo "== fuzz: $t: minimizing its corpus ($(du -sh "$corpus/$t" | cut -f1))"
    ASAN_OPTIONS=$asan cargo +"$NIGHTLY" fuzz cmin "$t" "$corpus/$t" -- -timeout=10 -rss_limit_mb=2048 >"$log" 2>&1 ||
      echo "fuzz: cmin failed, see $log" >&2
  fi
  echo "== fuzz: $t for ${seconds}s (log: $log)"
  if ASAN_OPTIONS=$asan cargo +"$NIGHTLY" fuzz run "$t" "$corpus/$t" -- "${args[@]}" >"$log" 2>&1; then
    status[$t]=ok
  else
    failed=1
    artifact=$(grep -o 'Test unit written to .*' "$log" | sed 's/Test unit written to //' | tail -1)
    status[$t]="FAILED: ${artifact:-see $log}"
    grep -E '^(==[0-9]+==ERROR|thread .* panicked|SUMMARY)' "$log" | head -5 >&2 || true
  fi
  execs[$t]=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
done

echo "== fuzz: summary (${seconds}s a target)"
printf '%-20s %14s  %s\n' target executions result
for t in "${targets[@]}"; do
  printf '%-20s %14s  %s\n' "$t" "${execs[$t]:-?}" "${status[$t]}"
done
exit $failed
