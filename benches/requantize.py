#!/usr/bin/env python3
"""Write a copy of a GGUF model with its quantized weights re-quantized to another legacy type.

    requantize.py INPUT.gguf q8_0|q4_0 OUTPUT.gguf

Every Q4_1 / Q8_0 tensor is dequantized to f32 and quantized again to the target type with llama.cpp's
own numpy quantizers (the `gguf` package); tensors already of the target type and float tensors (the
norms) are copied byte for byte. All metadata is copied; only `general.file_type` is set to the new type.
The benchmark uses this to run every engine on Q8_0 and Q4_0, the types llama.cpp has wasm SIMD kernels for.
"""
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

TARGETS = {"q8_0": (T.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0), "q4_0": (T.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0)}
REQUANTIZED_FROM = {T.Q4_1, T.Q8_0}
COPIED_AS_IS = {T.F32, T.F16}


def copy_metadata(reader: gguf.GGUFReader, writer: gguf.GGUFWriter, file_type: int) -> None:
    for field in reader.fields.values():
        # GGUF.* are the reader's virtual fields; the writer adds general.architecture itself.
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        value = file_type if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, kind, sub_type=sub_type)


def requantize(src: Path, target: str, dst: Path) -> None:
    qtype, file_type = TARGETS[target]
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    alignment = reader.fields.get(gguf.Keys.General.ALIGNMENT)
    writer = gguf.GGUFWriter(
        dst, arch, endianess=reader.endianess,
        **({"alignment": int(alignment.contents())} if alignment is not None else {}),
    )
    if alignment is not None:
        # GGUFWriter writes general.alignment itself when given one; do not copy it twice.
        reader.fields.pop(gguf.Keys.General.ALIGNMENT)
    copy_metadata(reader, writer, int(file_type))

    counts: dict[str, int] = {}
    for t in reader.tensors:
        if t.tensor_type == qtype or t.tensor_type in COPIED_AS_IS:
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
            action = f"{t.tensor_type.name} copied"
        elif t.tensor_type in REQUANTIZED_FROM:
            weights = gguf.dequantize(t.data, t.tensor_type).astype(np.float32)
            writer.add_tensor(t.name, gguf.quantize(weights, qtype), raw_dtype=qtype)
            action = f"{t.tensor_type.name} -> {qtype.name}"
        else:
            raise SystemExit(f"{t.name}: tensor type {t.tensor_type.name} is not handled")
        counts[action] = counts.get(action, 0) + 1

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{dst}: " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items())), file=sys.stderr)


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[2] not in TARGETS:
        raise SystemExit(__doc__)
    src, target, dst = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    # Write next to the destination first so an interrupted run never leaves a truncated model behind.
    part = dst.with_name(dst.name + ".part")
    requantize(src, target, part)
    part.replace(dst)


if __name__ == "__main__":
    main()
