#!/usr/bin/env python3
"""Our checkpoints as GGUF for the llama.cpp peer: llama.cpp's own convert_hf_to_gguf.py, run from
the sources scripts/build-llamacpp unpacked, with one thing told to it that it cannot work out.

Its converter recognises a BPE pre-tokenizer by hashing the tokens of a test string against a list
of published models; our tokenizers (byte-level BPE with GPT-2's split regex, trained by
scripts/train-models) are on no such list, so it stops. Their pre-tokenizer is GPT-2's, which is
what llama.cpp calls "gpt-2"; this script answers that for a tokenizer.json whose pre_tokenizer is
ByteLevel with use_regex (and refuses any other), then runs the converter unchanged.

  python scripts/llamacpp_convert.py LLAMA_CPP_SRC CHECKPOINT_DIR {f32,bf16,f16} OUT.gguf
(needs torch, transformers, numpy, safetensors, sentencepiece in the interpreter)."""
import json
import os
import runpy
import sys


def main():
    src, model, outtype, out = sys.argv[1:5]
    with open(os.path.join(model, "tokenizer.json")) as f:
        pre = json.load(f).get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        sys.exit(f"llamacpp_convert: {model}/tokenizer.json: pre_tokenizer {pre.get('type')!r} is not GPT-2's byte level; "
                 "let convert_hf_to_gguf.py recognise it")
    sys.path[:0] = [os.path.join(src, "gguf-py"), src]
    from conversion import base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    sys.argv = ["convert_hf_to_gguf.py", model, "--outtype", outtype, "--outfile", out]
    runpy.run_path(os.path.join(src, "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
