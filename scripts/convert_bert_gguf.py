#!/usr/bin/env python3
"""Convert a sentence-transformers BERT model (safetensors, config.json, tokenizer.json) to a GGUF of llama.cpp's
`bert` architecture, as llama.cpp's convert_hf_to_gguf.py (class BertModel) writes it: the same metadata keys,
tensor names (gguf-py's TensorNameMap), WordPiece vocabulary in "phantom space" form and special token ids.

Usage: convert_bert_gguf.py MODEL_DIR OUT.gguf {f16,q8_0}

Needs only numpy and gguf (no torch): safetensors is read as its header plus raw little-endian arrays.
Tensor types follow convert_hf_to_gguf.py: 1-D tensors, norms, position and token-type embeddings in F32; other
matrices in F16, or Q8_0 (gguf.quants.quantize) where their rows are whole blocks of 32, else F16.
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] not in SAFETENSORS_DTYPES:
            continue  # e.g. embeddings.position_ids (I64), which llama.cpp drops too
        start, end = info["data_offsets"]
        array = np.frombuffer(data[base + start : base + end], dtype=SAFETENSORS_DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"]).astype(np.float32)
    return tensors


def pooling_type(model_dir: Path) -> gguf.PoolingType | None:
    """sentence-transformers' Pooling module, as convert_hf_to_gguf.py's _try_set_pooling_type reads it."""
    modules = model_dir / "modules.json"
    if not modules.is_file():
        return None
    for module in json.loads(modules.read_text()):
        if module["type"] == "sentence_transformers.models.Pooling":
            config = json.loads((model_dir / module["path"] / "config.json").read_text())
            if config.get("pooling_mode_mean_tokens"):
                return gguf.PoolingType.MEAN
            if config.get("pooling_mode_cls_token"):
                return gguf.PoolingType.CLS
            if config.get("pooling_mode_lasttoken"):
                return gguf.PoolingType.LAST
            raise ValueError(f"pooling mode of {module['path']} is not supported")
    return None


def vocab(model_dir: Path) -> tuple[list[str], list[int]]:
    """Tokens in id order and their types: added special tokens are CONTROL, the rest NORMAL; then llama.cpp's
    phantom-space form (a word-initial piece gets U+2581 in front, a "##" continuation loses its "##")."""
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert tokenizer["model"]["type"] == "WordPiece", "only WordPiece tokenizers are BERT's"
    by_id = {i: t for t, i in tokenizer["model"]["vocab"].items()}
    special = {t["id"] for t in tokenizer["added_tokens"] if t["special"]}
    tokens, types = [], []
    for i in range(len(by_id)):
        token = by_id[i]
        if i in special:
            tokens.append(token)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(token[2:] if token.startswith("##") else "\u2581" + token)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def main() -> None:
    model_dir, out, ftype_name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[ftype_name]
    hparams = json.loads((model_dir / "config.json").read_text())
    assert hparams["model_type"] == "bert" and hparams["hidden_act"] == "gelu"
    assert hparams.get("position_embedding_type", "absolute") == "absolute"
    n_layers = hparams["num_hidden_layers"]

    w = gguf.GGUFWriter(out, "bert")
    w.add_name(model_dir.name)
    w.add_context_length(hparams["max_position_embeddings"])
    w.add_embedding_length(hparams["hidden_size"])
    w.add_feed_forward_length(hparams["intermediate_size"])
    w.add_block_count(n_layers)
    w.add_head_count(hparams["num_attention_heads"])
    w.add_layer_norm_eps(hparams["layer_norm_eps"])
    w.add_file_type(file_type)
    w.add_causal_attention(False)
    if (pooling := pooling_type(model_dir)) is not None:
        w.add_pooling_type(pooling)

    tokens, types = vocab(model_dir)
    w.add_token_type_count(hparams.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    # GGUF has no CLS key (llama.cpp reads [CLS] and [SEP] of a WordPiece vocabulary as its BOS and separator).
    special = ("bos", "eos", "unk", "sep", "pad", "mask")
    gguf.SpecialVocab(model_dir, n_vocab=len(tokens), special_token_types=special).add_to_gguf(w)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layers)
    keep_f32 = (gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES)
    keep_f32_names = {gguf.TENSOR_NAMES[t] + ".weight" for t in keep_f32}
    for hf_name, data in read_safetensors(model_dir / "model.safetensors").items():
        if hf_name.startswith("pooler."):
            continue  # llama.cpp uses BERT for embeddings only and drops the pooler
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ValueError(f"no GGUF name for tensor {hf_name}")
        if data.ndim <= 1 or name.endswith("_norm.weight") or name in keep_f32_names:
            w.add_tensor(name, data.astype(np.float32), raw_dtype=T.F32)
        elif file_type == gguf.LlamaFileType.MOSTLY_Q8_0 and data.shape[-1] % 32 == 0:
            w.add_tensor(name, quantize(data, T.Q8_0), raw_dtype=T.Q8_0)
        else:
            w.add_tensor(name, data.astype(np.float16), raw_dtype=T.F16)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
