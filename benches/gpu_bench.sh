#!/usr/bin/env bash
# The WebGPU benchmark (benches/gpu_bench.rs) on a machine with a real GPU that has no Rust
# toolchain and no copy of the model (the `device` machine): build here, run there.
#
#   benches/gpu_bench.sh prepare DIR   here: the release bench binary, the default model's twin
#                                      header (shapes, types, tokenizer; a few MB) and the Vulkan
#                                      loader package into DIR
#   benches/gpu_bench.sh device DIR    there: unpack the loader if the system has none, then run
#                                      prefill (128 tokens) and decode (64 tokens) on a same-shape
#                                      model with random weights; prints JSON lines
#   benches/gpu_bench.sh local         here: the same on the real model with whatever adapter wgpu finds
set -euo pipefail
cd "$(dirname "$0")/.."
build() {
  cargo bench --locked -p ruvllm --features gpu --bench gpu_bench --no-run 2>&1 \
    | tee /dev/stderr | grep -o '[^ (]*/release/deps/gpu_bench-[0-9a-f]*' | tail -1
}
case "${1:-}" in
  prepare)
    dir="${2:?usage: $0 prepare DIR}"
    mkdir -p "$dir"
    exe="$(build)"
    cp "$exe" "$dir/gpu_bench"
    strip "$dir/gpu_bench" # debug info is most of its size; the device call carries at most 64 MiB
    "$dir/gpu_bench" --write-twin-header "$(scripts/fetch-model.sh)" "$dir/twin.hdr"
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64-lists'
    mkdir -p /tmp/amd64-lists/partial
    # shellcheck disable=SC2086
    apt-get $o update >&2 && (cd "$dir" && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >&2)
    ls -la "$dir" >&2
    ;;
  device)
    dir="${2:?usage: $0 device DIR}"
    # The Vulkan loader and the GL/EGL dispatch libraries NVIDIA's Vulkan ICD links against.
    for f in "$dir"/*.deb; do dpkg -x "$f" /; done
    ldconfig
    icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES="$icd"; fi
    shift 2
    # Later copies of an option lose: extra arguments override the defaults.
    "$dir/gpu_bench" --twin "$dir/twin.hdr" "$@" --prompt-tokens 128 --gen-tokens 64
    ;;
  local)
    shift
    "$(build)" --model "$(scripts/fetch-model.sh)" "$@"
    ;;
  *)
    sed -n '2,13p' "$0"
    exit 2
    ;;
esac
