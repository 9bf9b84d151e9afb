#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python) on a GGUF: each prompt's ids and last-position logits,
and the ids of each string, as JSON on stdout. The fixture scripts run it in the interpreter
that has llama-cpp-python (its own venv: it builds llama.cpp) to check their reference against
llama.cpp.

    python llama_cpp_run.py MODEL.gguf REQUEST.json
    REQUEST.json: {"prompts": {name: text}, "strings": [text]}
    -> {"prompts": {name: {"ids": [...], "last_logits": [...]}}, "strings": [[ids]]}

F32 keys and values (llama.cpp's default F16 cache moves logits by ~1e-2), one thread, no BOS
unless the file asks (`tokenize(add_bos=...)` follows the file), special tokens parsed.
"""
import json
import sys

import llama_cpp
import numpy as np


def main():
    model_path, request_path = sys.argv[1:3]
    request = json.load(open(request_path))
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_batch=1024, n_threads=1, logits_all=True,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "true") == "true"
    out = {"prompts": {}, "strings": []}
    for name, text in request["prompts"].items():
        ids = llm.tokenize(text.encode(), add_bos=add_bos, special=True)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[len(ids) - 1], dtype=np.float64)
        out["prompts"][name] = {"ids": ids, "last_logits": logits.tolist()}
    for text in request["strings"]:
        out["strings"].append(llm.tokenize(text.encode(), add_bos=add_bos, special=True))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
