#!/usr/bin/env python3
"""llama.cpp natively, through llama-cpp-python: load a GGUF, then `runs` times (after a
warm-up) a prefill of `prompt_tokens` tokens and `gen_tokens` decode steps, on `threads`
threads; the medians and the peak resident memory as one JSON line. tests/browser/bench.mjs
runs it in the interpreter LLAMA_CPP_PYTHON names (./build.sh bench makes one).

    python llama_cpp_bench.py MODEL.gguf THREADS PROMPT_TOKENS GEN_TOKENS RUNS

The prompt is a fixed spread of ids over the vocabulary and each decode step runs a fixed id:
the work of a pass does not depend on which tokens it runs. F16 KV cache (llama.cpp's default).
"""
import json
import resource
import statistics
import sys
import time

import llama_cpp


def main():
    path, threads, prompt_tokens, gen_tokens, runs = sys.argv[1], *map(int, sys.argv[2:6])
    started = time.perf_counter()
    llm = llama_cpp.Llama(model_path=path, n_ctx=prompt_tokens + gen_tokens + 8, n_batch=max(prompt_tokens, 8),
                          n_ubatch=max(prompt_tokens, 8), n_threads=threads, n_threads_batch=threads, verbose=False)
    load_ms = (time.perf_counter() - started) * 1000
    vocab = llm.n_vocab()
    prefill, decode, ttft = [], [], []
    for run in range(runs + 1):
        ids = [(i * 7919 + run * 104_729) % (vocab - 1000) + 100 for i in range(prompt_tokens)]
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        t1 = time.perf_counter()
        for step in range(gen_tokens):
            llm.eval([1000 + step])
        t2 = time.perf_counter()
        if run > 0:
            prefill.append(prompt_tokens / (t1 - t0))
            decode.append(gen_tokens / (t2 - t1))
            ttft.append((t1 - t0) * 1000)
    print(json.dumps({
        "version": f"llama-cpp-python {llama_cpp.__version__}",
        "loadMs": load_ms,
        "ttftMs": statistics.median(ttft),
        "prefill": statistics.median(prefill),
        "decode": statistics.median(decode),
        "peakRssMiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


if __name__ == "__main__":
    main()
