#!/usr/bin/env python3
"""Tiny models of the families Nucleus runs without a real file here, and their float64 reference.

For each of Llama 3 (`llama` with `rope_freqs.weight` and the `llama-bpe` pre-tokenizer), Qwen2
(`qwen2`: Q/K/V biases, the `qwen2` pre-tokenizer) and Qwen3 (`qwen3`: per-head Q/K norms, heads
wider than the embedding divided by the head count): a byte-level BPE tokenizer trained on the
spot with the family's pre-tokenizer (Hugging Face `tokenizers`), a model with random weights
(transformers, from a config), written to GGUF as llama.cpp's `convert_hf_to_gguf.py` writes it
(gguf-py's writer; Llama's Q and K permuted for RoPE on adjacent pairs, Llama 3's frequency
factors computed as the converter computes them), its matrices quantized to Q8_0, Q5_0, Q5_1, Q4_0
and Q4_1 by gguf-py. The reference: transformers' float64 forward pass (eager attention) on the
weights the GGUF holds, dequantized by gguf-py; the tokenizer's ids for a set of strings. Two more
carry RoPE scaling as the converter writes it (`rope.scaling.*`): Qwen2 with YaRN, and a six-block
Gemma 3 (local blocks with a window, norms stored as 1 + w) with linear scaling on its global block.

Writes tests/fixtures/tiny/{family}.gguf and tests/fixtures/tiny/{family}.json, read by
tests/model_reference.rs and tests/tokenizer_reference.rs, {family}-attention.json (every head's
attention weights on one prompt, read by tests/attention_reference.rs), and three files Nucleus must refuse
(unknown-architecture.gguf, unknown-tokenizer.gguf, unsupported-type.gguf: tests/decode_tail.rs
and the browser tests). Deterministic (fixed seeds).

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers==5.24.0 tokenizers==0.23.3 gguf==0.19.0
    /tmp/venv/bin/python tests/tools/make_tiny_families.py [family ...]
"""
import json
import math
import os
import pathlib

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, LlamaFileType, RopeScalingType
from gguf.quants import dequantize, quantize
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = pathlib.Path(os.environ.get("NUCLEUS_TINY_OUT") or pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "tiny")

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp), as Hugging Face's tokenizer.json writes them.
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

CORPUS = """The capital of France is Paris. The capital of Italy is Rome, and the capital of Spain is Madrid.
Once upon a time, there was a very small model that learned to count: 1, 2, 3, 10, 42, 100, 2024, 31415.
It's a model; they're tiny, we'll see what they've learned. Don't worry: I'd say it's fine!
def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5
Sampling picks the next token: temperature, top-k, top-p and min-p shape the distribution.
Ünïcödé wörds, naïve café, 日本語のテキスト, emoji 🙂 and tabs\tbetween words.
""" * 3

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
                   "+ message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

TOKENIZER_STRINGS = [
    "Hello world", " leading space", "two  spaces and\ttab", "line one\nline two\n\n",
    "The year 2024 had 365 days; 3.14159!", "naïve café résumé", "日本語のテキスト", "emoji 🙂🚀 done",
    "don't you're I'll WE'LL", "x = f(y) ** 2  # comment", "   ", "a", "12345678", "ΑΒΓ αβγ Привет",
]

# What Qwen2 and Qwen3 files share: the qwen2 pre-tokenizer, ChatML, no BOS added.
QWEN_TOKENIZER = {
    "pre": "qwen2",
    "regex": QWEN2,
    "ignore_merges": False,
    "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "bos": "<|endoftext|>",
    "eos": "<|im_end|>",
    "add_bos": False,
    "template": CHATML,
}

FAMILIES = {
    "llama3": {
        "architecture": "llama",
        "pre": "llama-bpe",
        "regex": LLAMA3,
        "ignore_merges": True,
        "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
        # Llama 3's files leave add_bos_token out; llama.cpp adds BOS for llama-bpe.
        "add_bos": None,
        "template": LLAMA3_TEMPLATE,
        "tied": True,
        "heads": (4, 2, 16),
        "hidden": 64,
        "ffn": 160,
        "rope_theta": 10000.0,
        "types": {"attn_q": Q.Q8_0, "attn_k": Q.Q5_1, "attn_v": Q.Q8_0, "attn_output": Q.Q4_0,
                  "ffn_gate": Q.Q5_0, "ffn_up": Q.Q4_1, "ffn_down": Q.Q8_0},
    },
    "qwen2": {
        **QWEN_TOKENIZER,
        "architecture": "qwen2",
        "tied": True,
        "heads": (4, 2, 16),
        "hidden": 64,
        "ffn": 128,
        "rope_theta": 1000000.0,
        "types": {"attn_q": Q.Q5_0, "attn_k": Q.Q8_0, "attn_v": Q.Q5_1, "attn_output": Q.Q8_0,
                  "ffn_gate": Q.Q4_0, "ffn_up": Q.Q5_0, "ffn_down": Q.Q4_1},
    },
    "qwen3": {
        **QWEN_TOKENIZER,
        "architecture": "qwen3",
        "tied": False,
        # Heads wider than hidden / heads: 4 x 32 = 128 > 64, as Qwen3-0.6B's 16 x 128 > 1024.
        "heads": (4, 2, 32),
        "hidden": 64,
        "ffn": 192,
        "rope_theta": 1000000.0,
        "types": {"attn_q": Q.Q8_0, "attn_k": Q.Q8_0, "attn_v": Q.Q5_0, "attn_output": Q.Q5_1,
                  "ffn_gate": Q.Q8_0, "ffn_up": Q.Q4_1, "ffn_down": Q.Q5_0},
    },
}

# RoPE scaling as files carry it (`rope.scaling.*`), on tiny models of the families above (added
# after them: each family's seed is its position). YaRN: factor 4 over an original 64 positions,
# Qwen2.5's way of reaching 128k.
FAMILIES["qwen2-yarn"] = {
    **FAMILIES["qwen2"],
    "rope": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    "types": {"attn_q": Q.Q8_0, "attn_k": Q.Q8_0, "attn_v": Q.Q5_1, "attn_output": Q.Q8_0,
              "ffn_gate": Q.Q4_1, "ffn_up": Q.Q5_0, "ffn_down": Q.Q8_0},
}
# Gemma 3 (4B and larger): linear scaling by 8 on its global blocks only; five local blocks
# with a window of 8 keys and base 10,000 for each global one; norms stored as 1 + w.
FAMILIES["gemma3-linear"] = {
    **QWEN_TOKENIZER,
    "add_bos": True,
    "architecture": "gemma3",
    "tied": True,
    "heads": (4, 2, 32),
    "hidden": 64,
    "ffn": 128,
    "layers": 6,
    "window": 8,
    "rope_theta": 1000000.0,
    "rope": {"rope_type": "linear", "factor": 8.0},
    "types": {"attn_q": Q.Q8_0, "attn_k": Q.Q5_0, "attn_v": Q.Q8_0, "attn_output": Q.Q4_1,
              "ffn_gate": Q.Q8_0, "ffn_up": Q.Q5_1, "ffn_down": Q.Q8_0},
}


def train_tokenizer(family):
    model = models.BPE(ignore_merges=family["ignore_merges"])
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(family["regex"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=family["specials"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([CORPUS], trainer=trainer)
    return tokenizer


def llama3_rope_factors(head_dim, base, factor, low, high, old_context):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors for rope_type llama3."""
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    low_wavelen, high_wavelen = old_context / low, old_context / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute: Q/K rows reordered for RoPE on adjacent pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make(name, family, seed):
    from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

    tokenizer = train_tokenizer(family)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    n_vocab = len(tokens)
    heads, kv_heads, head_dim = family["heads"]
    hidden, ffn, layers = family["hidden"], family["ffn"], family.get("layers", 2)
    arch = family["architecture"]
    bos, eos = vocab[family["bos"]], vocab[family["eos"]]
    common = dict(vocab_size=n_vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=family["tied"], bos_token_id=bos, eos_token_id=eos,
                  attn_implementation="eager")
    rope = {"rope_type": "default", **family.get("rope", {}), "rope_theta": family["rope_theta"]}
    if name == "llama3":
        rope = {"rope_type": "llama3", "rope_theta": family["rope_theta"], "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
        config, cls = LlamaConfig(**common, head_dim=head_dim, rope_parameters=rope), LlamaForCausalLM
    elif arch == "qwen2":
        config, cls = Qwen2Config(**common, rope_parameters=rope), Qwen2ForCausalLM
    elif arch == "gemma3":
        # transformers' Gemma 3 scales queries by query_pre_attn_scalar^-0.5; llama.cpp by
        # head_dim^-0.5 (all but the 27B): the two agree when it is the head dimension.
        rope = {"full_attention": rope, "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
        config = Gemma3TextConfig(**common, head_dim=head_dim, rope_parameters=rope, sliding_window=family["window"],
                                  query_pre_attn_scalar=head_dim, hidden_activation="gelu_pytorch_tanh")
        cls = Gemma3ForCausalLM
    else:
        config, cls = Qwen3Config(**common, head_dim=head_dim, rope_parameters=rope), Qwen3ForCausalLM
    torch.manual_seed(seed)
    model = cls(config).to(torch.float64).eval()
    rng = np.random.default_rng(seed)

    writer = GGUFWriter(str(OUT / f"{name}.gguf"), arch)
    writer.add_name(f"tiny {name}")
    writer.add_context_length(256)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(family["rope_theta"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(LlamaFileType.MOSTLY_Q8_0)
    if name == "llama3":
        writer.add_vocab_size(n_vocab)
        writer.add_rope_dimension_count(head_dim)
    if arch in ("qwen3", "gemma3"):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if arch == "gemma3":
        writer.add_sliding_window(family["window"])
    # convert_hf_to_gguf.py's ModelBase.set_gguf_parameters (the global blocks' parameters).
    scaling = family.get("rope", {})
    if scaling.get("rope_type") == "linear":
        writer.add_rope_scaling_type(RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(scaling["factor"])
    elif scaling.get("rope_type") == "yarn":
        writer.add_rope_scaling_type(RopeScalingType.YARN)
        writer.add_rope_scaling_factor(scaling["factor"])
        writer.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(family["pre"])
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in family["specials"] else 1 for t in tokens])
    writer.add_token_merges([" ".join(pair) for pair in json.loads(tokenizer.to_str())["model"]["merges"]])
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    if family["add_bos"] is not None:
        writer.add_add_bos_token(family["add_bos"])
    writer.add_chat_template(family["template"])

    state = {}

    def put(gguf_name, hf_name, values, qtype=None, transform=None, inverse=None):
        """Writes values (as the GGUF stores them) and puts what the GGUF holds back into the model."""
        stored = values if transform is None else transform(values)
        if qtype is None:
            kind = np.float16 if gguf_name == "token_embd.weight" else np.float32
            held = stored.astype(kind)
            writer.add_tensor(gguf_name, held)
            held = held.astype(np.float64)
        else:
            packed = quantize(stored.astype(np.float32), qtype)
            writer.add_tensor(gguf_name, packed, raw_dtype=qtype)
            held = dequantize(packed, qtype).reshape(stored.shape).astype(np.float64)
        if inverse is not None:
            held = inverse(held)
        state[hf_name] = torch.from_numpy(held)

    def matrix(rows, cols, gain=1.0):
        return rng.normal(0, gain / math.sqrt(cols), size=(rows, cols))

    def norm(n):
        return 1.0 + 0.2 * rng.normal(size=n)

    # Gemma's RMSNorm multiplies by 1 + w; its files store 1 + w (the converter's norm_shift).
    shift = (lambda w: w + 1.0, lambda w: w - 1.0) if arch == "gemma3" else (None, None)

    def put_norm(gguf_name, hf_name, n):
        put(gguf_name, hf_name, norm(n) - (1.0 if arch == "gemma3" else 0.0), None, *shift)

    # A small embedding and strong sub-layers, so that a tied output layer does not simply repeat the
    # last token and greedy decoding goes somewhere.
    put("token_embd.weight", "model.embed_tokens.weight", rng.normal(0, 0.35, size=(n_vocab, hidden)))
    q_perm = (lambda w: permute(w, heads, heads), lambda w: unpermute(w, heads, heads)) if arch == "llama" else (None, None)
    k_perm = (lambda w: permute(w, heads, kv_heads), lambda w: unpermute(w, heads, kv_heads)) if arch == "llama" else (None, None)
    types = family["types"]
    for i in range(layers):
        hf, g = f"model.layers.{i}", f"blk.{i}"
        put_norm(f"{g}.attn_norm.weight", f"{hf}.input_layernorm.weight", hidden)
        put(f"{g}.attn_q.weight", f"{hf}.self_attn.q_proj.weight", matrix(heads * head_dim, hidden), types["attn_q"], *q_perm)
        put(f"{g}.attn_k.weight", f"{hf}.self_attn.k_proj.weight", matrix(kv_heads * head_dim, hidden), types["attn_k"], *k_perm)
        put(f"{g}.attn_v.weight", f"{hf}.self_attn.v_proj.weight", matrix(kv_heads * head_dim, hidden), types["attn_v"])
        if arch == "qwen2":
            for proj, n in [("q", heads), ("k", kv_heads), ("v", kv_heads)]:
                put(f"{g}.attn_{proj}.bias", f"{hf}.self_attn.{proj}_proj.bias", 0.5 * rng.normal(size=n * head_dim))
        if arch in ("qwen3", "gemma3"):
            put_norm(f"{g}.attn_q_norm.weight", f"{hf}.self_attn.q_norm.weight", head_dim)
            put_norm(f"{g}.attn_k_norm.weight", f"{hf}.self_attn.k_norm.weight", head_dim)
        put(f"{g}.attn_output.weight", f"{hf}.self_attn.o_proj.weight", matrix(hidden, heads * head_dim, 2.0), types["attn_output"])
        if arch == "gemma3":
            put_norm(f"{g}.post_attention_norm.weight", f"{hf}.post_attention_layernorm.weight", hidden)
            put_norm(f"{g}.ffn_norm.weight", f"{hf}.pre_feedforward_layernorm.weight", hidden)
            put_norm(f"{g}.post_ffw_norm.weight", f"{hf}.post_feedforward_layernorm.weight", hidden)
        else:
            put_norm(f"{g}.ffn_norm.weight", f"{hf}.post_attention_layernorm.weight", hidden)
        put(f"{g}.ffn_gate.weight", f"{hf}.mlp.gate_proj.weight", matrix(ffn, hidden), types["ffn_gate"])
        put(f"{g}.ffn_up.weight", f"{hf}.mlp.up_proj.weight", matrix(ffn, hidden), types["ffn_up"])
        put(f"{g}.ffn_down.weight", f"{hf}.mlp.down_proj.weight", matrix(hidden, ffn, 2.0), types["ffn_down"])
    put_norm("output_norm.weight", "model.norm.weight", hidden)
    if not family["tied"]:
        put("output.weight", "lm_head.weight", matrix(n_vocab, hidden), Q.Q8_0)
    if name == "llama3":
        factors = llama3_rope_factors(head_dim, family["rope_theta"], rope["factor"], rope["low_freq_factor"],
                                      rope["high_freq_factor"], rope["original_max_position_embeddings"])
        writer.add_tensor("rope_freqs.weight", factors)
    if family["tied"]:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    def ids_of(text):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        add_bos = family["add_bos"] if family["add_bos"] is not None else True
        return ([bos] if add_bos else []) + ids

    prompts = {
        "capital": "The capital of France is",
        "count": "Once upon a time, there was a very small model that learned to count: 1, 2,",
        "chat": ("<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
                 if name == "llama3" else "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"),
    }
    cases = {}
    for case, text in prompts.items():
        ids = ids_of(text)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].numpy()
            greedy, margins = [], []
            sequence = list(ids)
            for _ in range(8):
                step = model(torch.tensor([sequence])).logits[0, -1]
                best = torch.topk(step, 2).values
                nxt = int(step.argmax())
                greedy.append(nxt)
                margins.append(round(float(best[0] - best[1]), 5))
                sequence.append(nxt)
        top = np.argsort(-logits, kind="stable")[:20]
        cases[case] = {
            "text": text,
            "ids": ids,
            "top20": [{"id": int(t), "piece": tokens[t], "logit": float(logits[t])} for t in top],
            "greedy": greedy,
            "greedy_margins": margins,
            "last_logits": [float(v) for v in logits.astype(np.float32)],
        }
    reference = {
        "model": {"file": f"{name}.gguf", "architecture": arch, "pre_tokenizer": family["pre"], "vocab": n_vocab},
        "how": "transformers float64 eager forward pass on the GGUF's weights dequantized by gguf-py; "
               "ids from the Hugging Face tokenizer the GGUF's vocabulary and merges were written from",
        "logit_cases": cases,
        "tokenizer_cases": [{"text": t, "ids": ids_of(t)} for t in TOKENIZER_STRINGS],
    }
    (OUT / f"{name}.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")
    # What each layer's heads attend to on the "count" prompt (transformers' output_attentions,
    # float64): per layer, per head, per query position the weights of positions 0..=position.
    ids = ids_of(prompts["count"])
    with torch.no_grad():
        attentions = model(torch.tensor([ids]), output_attentions=True).attentions
    layers = [[[[float(f"{w:.9g}") for w in head[p, :p + 1].tolist()] for p in range(len(ids))] for head in layer[0]]
              for layer in attentions]
    attention = {"how": "transformers float64 eager attention weights (output_attentions) on the GGUF's weights",
                 "case": "count", "ids": ids, "layers": layers}
    (OUT / f"{name}-attention.json").write_text(json.dumps(attention, separators=(",", ":")) + "\n")
    print(f"{name}: vocab {n_vocab}, {(OUT / f'{name}.gguf').stat().st_size} bytes")


def patched(source, target, replacements, type_patch=None):
    """A copy of `source` with byte strings replaced (each by one of the same length, so the file
    stays consistent) and, with `type_patch = (tensor name, old type, new type)`, that tensor's
    type id changed in the tensor table (between types of the same block size)."""
    data = bytearray((OUT / source).read_bytes())
    for old, new in replacements:
        assert len(old) == len(new) and old in data, (old, new)
        data = bytearray(bytes(data).replace(old, new))
    if type_patch:
        name, old, new = type_patch
        at = data.index(name.encode()) + len(name)
        n_dims = int.from_bytes(data[at:at + 4], "little")
        at += 4 + 8 * n_dims
        assert int.from_bytes(data[at:at + 4], "little") == old
        data[at:at + 4] = new.to_bytes(4, "little")
    (OUT / target).write_bytes(bytes(data))
    print(f"{target}: from {source}")


def broken_variants():
    """Files Nucleus must refuse by name before uploading anything: an architecture it does not
    run (`mamba`), a tokenizer model it does not know (`bert`), a tensor type its readers do not
    take (IQ4_NL, 18 bytes per 32 weights like Q4_0, so the file stays whole)."""
    patched("qwen3.gguf", "unknown-architecture.gguf", [(b"qwen3", b"mamba")])
    patched("qwen2.gguf", "unknown-tokenizer.gguf", [(b"gpt2", b"bert")])
    patched("qwen2.gguf", "unsupported-type.gguf", [], ("blk.0.ffn_gate.weight", int(Q.Q4_0), int(Q.IQ4_NL)))


if __name__ == "__main__":
    # Every family, or those named: `make_tiny_families.py qwen2-yarn` (seeds stay each family's).
    import sys
    OUT.mkdir(parents=True, exist_ok=True)
    for seed, (name, family) in enumerate(FAMILIES.items()):
        if len(sys.argv) < 2 or name in sys.argv[1:]:
            make(name, family, 1000 + seed)
    if len(sys.argv) < 2:
        broken_variants()
