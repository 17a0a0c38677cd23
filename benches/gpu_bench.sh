#!/usr/bin/env bash
# The WebGPU benchmark (benches/gpu_bench.rs) on a machine with a real GPU that has no Rust toolchain and no copy of
# the model (the `device` machine), and llama.cpp CUDA there on the same random-weight twins: build here, run there.
#
#   benches/gpu_bench.sh prepare DIR [--llama-cpp]  here: the release bench binary, the Vulkan loader packages and
#       the twin headers (shapes, types, tokenizer; a few MB each) of the default model (DIR/twin.hdr) and of the
#       1B-shaped one (DIR/twin1b.hdr, if made) into DIR; --llama-cpp: llama.cpp's source too, pruned (~30 MB)
#   benches/gpu_bench.sh device DIR [ARGS]  there: unpack the loader, then prefill (128 tokens) and decode (64
#       tokens) on DIR/twin.hdr's model; ARGS: --twin DIR/twin1b.hdr, --prompt-tokens 512, ...; prints JSON lines
#   benches/gpu_bench.sh stream8b DIR  there: write the Llama-3.1-8B-shaped Q4_K_M twin (~4.9 GB, random weights:
#       DIR/random_model, once per warm machine), stream it to the GPU (gpu_bench --stream: the file never held),
#       then load it whole for comparison; each prints its load time, bytes held and peak resident memory, then speed
#   benches/gpu_bench.sh llama-cuda DIR [TWIN.hdr ...]  there: llama.cpp's llama-bench built with CUDA (once per
#       warm machine, ~4 min on 16 cores) on each twin's GGUF (default: DIR/twin.hdr, DIR/twin1b.hdr): pp128,
#       pp512, pp2048, tg64, flash attention off and on, then tg64 at a depth of 4,000 with it on, 5 reps; prints
#       JSON lines
#   benches/gpu_bench.sh llama-cpu DIR [TWIN.hdr ...]  there: the CPU side by side on that machine's CPU (AVX512-VNNI
#       where the H200 hosts have it): llama.cpp's llama-bench built for the CPU alone (GGML_NATIVE, once per warm
#       machine) against our `ruvllm bench` (DIR/ruvllm, the release CLI prepare copies), 1 and 2 threads, a 64-token
#       prompt and 32 generated, 3 reps, on each twin (default: every DIR/*.hdr); prints JSON lines
#   benches/gpu_bench.sh local [ARGS]  here: the WebGPU bench on the real model with whatever adapter wgpu finds
set -euo pipefail
cd "$(dirname "$0")/.."
build() {
  cargo bench --locked -p ruvllm --features gpu --bench gpu_bench --no-run 2>&1 \
    | tee /dev/stderr | grep -o '[^ (]*/release/deps/gpu_bench-[0-9a-f]*' | tail -1
}
model1b=~/.cache/ruvllm/Llama-3.2-1B-shape.random.Q4_K_M.gguf
lcpp_build=/root/lcpp-build # outside the working tree: it survives between calls on a warm machine
lcpp_cpu_build=/root/lcpp-cpu-build
# The Vulkan loader and the GL/EGL dispatch libraries NVIDIA's Vulkan ICD links against, from DIR's packages.
vulkan_loader() {
  for f in "$1"/*.deb; do dpkg -x "$f" /; done
  ldconfig
  local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES="$icd"; fi
}

case "${1:-}" in
  prepare)
    dir="${2:?usage: $0 prepare DIR [--llama-cpp]}"
    mkdir -p "$dir"
    exe="$(build)"
    cp "$exe" "$dir/gpu_bench"
    strip "$dir/gpu_bench" # debug info is most of its size; the device call carries at most 64 MiB
    cargo bench --locked -p ruvllm --bench random_model --no-run 2>&1 | tee /dev/stderr |
      grep -o '[^ (]*/release/deps/random_model-[0-9a-f]*' | tail -1 | xargs -I{} cp {} "$dir/random_model"
    strip "$dir/random_model"
    cargo build --release --locked -p ruvllm-cli >&2 # the CPU side of `llama-cpu`
    cp target/release/ruvllm "$dir/ruvllm"
    strip "$dir/ruvllm"
    # The default model's copies in the other types, where benches/compare.sh made them: their twins for `llama-cpu`.
    for quant in Q8_0 Q4_0 Q4_K_M; do
      copy="$(scripts/fetch-model.sh)"
      copy="${copy/Q4_1.gguf/$quant.gguf}"
      if [ -f "$copy" ]; then "$dir/gpu_bench" --write-twin-header "$copy" "$dir/twin-${quant,,}.hdr"; fi
    done
    "$dir/gpu_bench" --write-twin-header "$(scripts/fetch-model.sh)" "$dir/twin.hdr"
    if [ -f "$model1b" ]; then
      "$dir/gpu_bench" --write-twin-header "$model1b" "$dir/twin1b.hdr"
    else
      echo "no $model1b, so no twin1b.hdr: benches/README.md's \"Peak memory\" has the command that makes it" >&2
    fi
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64-lists'
    mkdir -p /tmp/amd64-lists/partial
    # shellcheck disable=SC2086
    apt-get $o update >&2 && (cd "$dir" && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >&2)
    if [ "${3:-}" = --llama-cpp ]; then
      # llama.cpp at node-llama-cpp's release (the git bundle its npm package ships; benches/setup.sh installs it),
      # without what llama-bench's CUDA build does not read. tools/mtmd and tools/server stay: tools/CMakeLists.txt
      # adds mtmd unconditionally.
      pkg=benches/node_modules/node-llama-cpp
      [ -f "$pkg/llama/gitRelease.bundle" ] || { echo "no $pkg/llama/gitRelease.bundle: benches/setup.sh" >&2; exit 1; }
      tmp="$(mktemp -d)"
      git -c advice.detachedHead=false -c init.defaultBranch=main clone -q "$pkg/llama/gitRelease.bundle" "$tmp/src"
      rm -rf "$dir/llama.cpp" && mkdir "$dir/llama.cpp"
      (cd "$tmp/src" && tar --exclude=.git --exclude=./models --exclude=./docs --exclude=./tests \
        --exclude=./examples --exclude=./tools/ui --exclude=./benches --exclude=./gguf-py --exclude=./media -cf - .) \
        | tar -xf - -C "$dir/llama.cpp"
      rm -rf "$tmp"
      (cd "$dir/llama.cpp/ggml/src" && rm -rf ggml-sycl ggml-cann ggml-opencl ggml-metal ggml-vulkan ggml-webgpu \
        ggml-hexagon ggml-et ggml-openvino ggml-virtgpu ggml-musa ggml-zdnn ggml-rpc)
      tag="$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$pkg/llama/llama.cpp.info.json")"
      ver="$(sed -n 's/^  "version": *"\([^"]*\)".*/\1/p' "$pkg/package.json")"
      echo "llama.cpp $tag, from node-llama-cpp $ver's gitRelease.bundle" >"$dir/llama.cpp/RELEASE.txt"
      du -sh "$dir/llama.cpp" >&2
    fi
    ls -la "$dir" >&2
    du -sh "$dir" >&2
    ;;
  device)
    dir="${2:?usage: $0 device DIR [ARGS]}"
    vulkan_loader "$dir"
    shift 2
    # gpu_bench reads the first copy of an option: the defaults go after the caller's arguments, and the default twin
    # only where the caller names no model (--twin beats --model in gpu_bench, so it would win wherever it stood).
    twin=(--twin "$dir/twin.hdr")
    for a in "$@"; do case "$a" in --twin | --model | --stream) twin=() ;; esac; done
    "$dir/gpu_bench" "$@" ${twin[@]+"${twin[@]}"} --prompt-tokens 128 --gen-tokens 64
    ;;
  stream8b)
    dir="${2:?usage: $0 stream8b DIR}"
    vulkan_loader "$dir"
    model8b=/root/llama8b-shape.random.Q4_K_M.gguf # outside the working tree: kept on a warm machine
    [ -f "$model8b" ] || "$dir/random_model" --tokenizer-from "$dir/twin.hdr" --arch llama8b --out "$model8b"
    "$dir/gpu_bench" --stream "$model8b" --prompt-tokens 128 --gen-tokens 64 --repeat 3
    "$dir/gpu_bench" --model "$model8b" --prompt-tokens 128 --gen-tokens 64 --repeat 1
    ;;
  llama-cuda)
    dir="${2:?usage: $0 llama-cuda DIR [TWIN.hdr ...]}"
    shift 2
    if [ $# -eq 0 ]; then
      for t in "$dir/twin.hdr" "$dir/twin1b.hdr"; do if [ -f "$t" ]; then set -- "$@" "$t"; fi; done
      [ $# -gt 0 ] || { echo "no $dir/twin.hdr or $dir/twin1b.hdr: run '$0 prepare DIR' first" >&2; exit 1; }
    fi
    bench="$lcpp_build/bin/llama-bench"
    if [ ! -x "$bench" ]; then
      [ -f "$dir/llama.cpp/CMakeLists.txt" ] || { echo "no $dir/llama.cpp: '$0 prepare DIR --llama-cpp'" >&2; exit 1; }
      # A copy outside the working tree, once per machine: the tree is sent again with every call, and inside it
      # llama.cpp's build-info would take this repository's git commit for its own.
      [ -d /root/lcpp-src ] || cp -r "$dir/llama.cpp" /root/lcpp-src
      log="${OUT:-/tmp}/llama-cpp-build.log" # $OUT: what the device call brings back
      echo "building llama-bench with CUDA in $lcpp_build (log: $log)" >&2
      if ! { cmake -S /root/lcpp-src -B "$lcpp_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON &&
        cmake --build "$lcpp_build" --target llama-bench -j "$(nproc)"; } >"$log" 2>&1; then
        tail -40 "$log" >&2
        exit 1
      fi
    fi
    cat /root/lcpp-src/RELEASE.txt >&2 2>/dev/null || true
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >&2
    fi
    for hdr in "$@"; do
      gguf="/tmp/$(basename "$hdr" .hdr).gguf"
      if [ ! -f "$gguf" ]; then "$dir/gpu_bench" --twin "$hdr" --write-twin "$gguf.part" && mv "$gguf.part" "$gguf"; fi
      err="/tmp/$(basename "$hdr" .hdr).llama-bench.err"
      # Prefill of 128, 512 and 2,048 tokens and decode from an empty context; then decode at a depth of 4,000
      # (the issue's long context; flash attention on, llama.cpp's faster setting there).
      if ! { "$bench" -m "$gguf" -ngl 99 -p 128,512,2048 -n 64 -r 5 -fa 0,1 -o jsonl &&
        "$bench" -m "$gguf" -ngl 99 -p 0 -n 64 -d 4000 -r 5 -fa 1 -o jsonl; } 2>"$err"; then
        tail -20 "$err" >&2
        exit 1
      fi
    done
    ;;
  llama-cpu)
    dir="${2:?usage: $0 llama-cpu DIR [TWIN.hdr ...]}"
    shift 2
    if [ $# -eq 0 ]; then set -- "$dir"/*.hdr; fi
    bench="$lcpp_cpu_build/bin/llama-bench"
    if [ ! -x "$bench" ]; then
      [ -f "$dir/llama.cpp/CMakeLists.txt" ] || { echo "no $dir/llama.cpp: '$0 prepare DIR --llama-cpp'" >&2; exit 1; }
      [ -d /root/lcpp-src ] || cp -r "$dir/llama.cpp" /root/lcpp-src
      log="${OUT:-/tmp}/llama-cpp-cpu-build.log"
      echo "building llama-bench for the CPU in $lcpp_cpu_build (log: $log)" >&2
      if ! { cmake -S /root/lcpp-src -B "$lcpp_cpu_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF         -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF         -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON &&
        cmake --build "$lcpp_cpu_build" --target llama-bench -j "$(nproc)"; } >"$log" 2>&1; then
        tail -40 "$log" >&2
        exit 1
      fi
    fi
    grep -m1 'model name' /proc/cpuinfo >&2
    grep -o -w 'avx512_vnni\|avx512f\|avx_vnni\|amx_int8' /proc/cpuinfo | sort | uniq -c >&2
    for hdr in "$@"; do
      gguf="/tmp/$(basename "$hdr" .hdr).gguf"
      if [ ! -f "$gguf" ]; then "$dir/gpu_bench" --twin "$hdr" --write-twin "$gguf.part" && mv "$gguf.part" "$gguf"; fi
      err="/tmp/$(basename "$hdr" .hdr).llama-cpu.err"
      # Both engines on the same two cores, one after the other (taskset: the machine's other cores stay idle).
      if ! taskset -c 0,1 "$bench" -m "$gguf" -t 1,2 -p 64 -n 32 -r 3 -o jsonl 2>"$err"; then
        tail -20 "$err" >&2
        exit 1
      fi
      for t in 1 2; do
        for rep in 1 2 3; do
          taskset -c 0,1 "$dir/ruvllm" bench --model "$gguf" --backend cpu --threads "$t" --prompt-tokens 64 \
            --gen-tokens 32 | sed "s|^{|{\"twin\":\"$(basename "$hdr" .hdr)\",\"rep\":$rep,|"
        done
      done
    done
    ;;
  local)
    shift
    "$(build)" --model "$(scripts/fetch-model.sh)" "$@"
    ;;
  *)
    sed -n '2,17p' "$0"
    exit 2
    ;;
esac
