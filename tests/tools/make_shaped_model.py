#!/usr/bin/env python3
"""A GGUF with a real model's shapes, tensor types and vocabulary, and random weights: for the
bench and the browser tests, where no real checkpoint is reachable.

    python3 make_shaped_model.py SHAPE OUT.gguf     (needs gguf==0.19.0 and numpy; ./build.sh runs it)

SHAPE `qwen35-0.8b`: Qwen3.5-0.8B (its config.json's text_config: 24 blocks, 18 Gated DeltaNet and
6 gated attention, hidden 1024, FFN 3584, 8 query and 2 KV heads of 256 with RoPE on 64 of them,
16 key and 16 value DeltaNet heads of 128, conv kernel 4, tied embedding) with the real 248,320-row
vocabulary and chat template (copied from tests/fixtures/tiny/qwen35.gguf, whose vocabulary is
the real one), its tensors in the types llama.cpp's Q4_K_M recipe (`llama_tensor_get_type`) gives
them: the tied embedding Q6_K, `attn_qkv` Q5_K, `attn_v` and `ffn_down` Q6_K on the blocks
`use_more_bits` picks, every other matrix Q4_K, vectors and the convolution F32.

SHAPE `gemma3-1b`: Gemma 3 1B (google/gemma-3-1b-it's config: 26 blocks, hidden 1152, FFN 6912,
4 query heads and 1 KV head of 256, five local blocks with a window of 512 for each global one, a
32,768-token context) with the real 262,144-token vocabulary (copied from Gemma 3 270M's file,
NUCLEUS_GEMMA or ~/.cache/nucleus/models/gemma-3-270m-q4_k_m.gguf) in Q4_K_M's types: rows of
1,152 values are not whole K-quant blocks of 256, so llama.cpp's recipe falls back there (Q4_K to
Q5_0, Q6_K to Q8_0: the tied embedding, Q, K, V, gate and up), and keeps Q4_K (Q6_K where
`use_more_bits`) for the output projection and `ffn_down`. About 780 MB.

SHAPE `gemma3-4b`: Gemma 3 4B's text model (google/gemma-3-4b-it's text_config: 34 blocks, hidden
2560, FFN 10240, 8 query and 4 KV heads of 256, five local blocks with a window of 1,024 for each
global one, linear RoPE scaling x8 on the global blocks, a 131,072-token context) with the same
vocabulary as the 1B (the 4B's own has 64 more rows, its image tokens), every row whole K-quant
blocks, so Q4_K_M's types without fallbacks. About 2.4 GB: the bench's "bigger than a 1B" file.

The weights are random blocks (random quants and scales, the scales small enough that the
activations stay finite), made in their quantized form: nothing is quantized, so the file takes
seconds. Deterministic: the same bytes every run (a seeded PCG64).
"""
import os
import pathlib
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, RopeScalingType

HERE = pathlib.Path(__file__).resolve().parent
GEMMA = pathlib.Path(os.environ.get("NUCLEUS_GEMMA")
                     or pathlib.Path.home() / ".cache/nucleus/models/gemma-3-270m-q4_k_m.gguf")

SHAPES = {
    "qwen35-0.8b": {
        "architecture": "qwen35", "name": "Qwen3.5 0.8B shape (random weights)", "size_label": "0.8B",
        "blocks": 24, "hidden": 1024, "ffn": 3584, "heads": 8, "kv_heads": 2, "head_dim": 256, "rope_dims": 64,
        "rope_base": 1e7, "sections": [11, 11, 10, 0], "context": 262_144, "interval": 4,
        "delta": {"key_heads": 16, "value_heads": 16, "head_dim": 128, "kernel": 4},
        "vocabulary": HERE.parents[0] / "fixtures" / "tiny" / "qwen35.gguf",
    },
    "gemma3-1b": {
        "architecture": "gemma3", "name": "Gemma 3 1B shape (random weights)", "size_label": "1B",
        "blocks": 26, "hidden": 1152, "ffn": 6912, "heads": 4, "kv_heads": 1, "head_dim": 256, "rope_dims": 256,
        "rope_base": 1e6, "context": 32_768, "window": 512,
        "vocabulary": GEMMA,
    },
    "gemma3-4b": {
        "architecture": "gemma3", "name": "Gemma 3 4B shape (random weights)", "size_label": "4B",
        "blocks": 34, "hidden": 2560, "ffn": 10240, "heads": 8, "kv_heads": 4, "head_dim": 256, "rope_dims": 256,
        "rope_base": 1e6, "context": 131_072, "window": 1024, "linear_rope_scaling": 8.0,
        "vocabulary": GEMMA,
    },
}


def use_more_bits(i, n):
    """llama.cpp's choice of the blocks whose attn_v and ffn_down get more bits."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_type(qtype, cols):
    """llama.cpp's fallback for a row that is not whole K-quant blocks (`convert_incompatible_tensor`)."""
    if cols % 256 == 0:
        return qtype
    return {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}[qtype]


def random_blocks(rng, qtype, rows, cols):
    """`rows × cols` weights of `qtype` as random blocks: bytes `[rows, row_bytes]`."""
    block, size = GGML_QUANT_SIZES[qtype]
    assert cols % block == 0, (qtype, cols)
    blocks = rows * cols // block
    data = rng.integers(0, 256, size=(blocks, size), dtype=np.uint8)
    # Scales: f16 values small enough for weights of about 1/sqrt(cols).
    d = np.float16(2.0 / (cols ** 0.5) / (63 * 15)).tobytes()
    if qtype in (Q.Q5_0, Q.Q8_0):
        # d first; quants of up to 16 (Q5_0) or 128 (Q8_0) in magnitude.
        data[:, 0:2] = np.frombuffer(np.float16(1.0 / (cols ** 0.5) / (16 if qtype == Q.Q5_0 else 128)).tobytes(), np.uint8)
    elif qtype in (Q.Q4_K, Q.Q5_K):
        # d and dmin first.
        data[:, 0:2] = np.frombuffer(d, np.uint8)
        data[:, 2:4] = np.frombuffer(np.float16(float(np.frombuffer(d, np.float16)[0]) * 8).tobytes(), np.uint8)
    elif qtype == Q.Q6_K:
        # d last, after 128 + 64 quant bytes and 16 signed scales.
        data[:, 208:210] = np.frombuffer(np.float16(1.0 / (cols ** 0.5) / (128 * 32)).tobytes(), np.uint8)
    else:
        raise ValueError(qtype)
    return data.reshape(rows, cols // block * size)


def main():
    shape_name, out = sys.argv[1], sys.argv[2]
    shape = SHAPES[shape_name]
    arch = shape["architecture"]
    rng = np.random.default_rng(20_260_500)
    writer = GGUFWriter(out, arch)
    vocabulary = GGUFReader(shape["vocabulary"])
    writer.add_type("model")
    writer.add_name(shape["name"])
    writer.add_size_label(shape["size_label"])
    writer.add_file_type(15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    writer.add_quantization_version(2)
    writer.add_block_count(shape["blocks"])
    writer.add_context_length(shape["context"])
    writer.add_embedding_length(shape["hidden"])
    writer.add_feed_forward_length(shape["ffn"])
    writer.add_head_count(shape["heads"])
    writer.add_head_count_kv(shape["kv_heads"])
    writer.add_key_length(shape["head_dim"])
    writer.add_value_length(shape["head_dim"])
    writer.add_rope_dimension_count(shape["rope_dims"])
    writer.add_rope_freq_base(shape["rope_base"])
    if arch == "gemma3":
        writer.add_layer_norm_rms_eps(1e-6)
        writer.add_sliding_window(shape["window"])
        if "linear_rope_scaling" in shape:
            writer.add_rope_scaling_type(RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(shape["linear_rope_scaling"])
        copy_tokenizer(writer, vocabulary)
        write_gemma3(writer, rng, shape, len(vocabulary.fields["tokenizer.ggml.tokens"].data))
        return finish(writer, out)
    writer.add_rope_dimension_sections(shape["sections"])
    writer.add_layer_norm_rms_eps(1e-6)
    delta = shape["delta"]
    recurrent = [(i + 1) % shape["interval"] != 0 for i in range(shape["blocks"])]
    writer.add_ssm_conv_kernel(delta["kernel"])
    writer.add_ssm_state_size(delta["head_dim"])
    writer.add_ssm_group_count(delta["key_heads"])
    writer.add_ssm_time_step_rank(delta["value_heads"])
    writer.add_ssm_inner_size(delta["value_heads"] * delta["head_dim"])
    writer.add_array(f"{arch}.attention.recurrent_layers", recurrent)
    writer.add_uint32(f"{arch}.full_attention_interval", shape["interval"])
    copy_tokenizer(writer, vocabulary)
    vocab = len(vocabulary.fields["tokenizer.ggml.tokens"].data)

    d, ffn = shape["hidden"], shape["ffn"]
    q_dim, kv_dim = shape["heads"] * shape["head_dim"], shape["kv_heads"] * shape["head_dim"]
    key_dim, value_dim = delta["key_heads"] * delta["head_dim"], delta["value_heads"] * delta["head_dim"]
    channels = 2 * key_dim + value_dim

    def matrix(name, qtype, rows, cols):
        data = random_blocks(rng, qtype, rows, cols)
        writer.add_tensor(name, data, raw_dtype=qtype)

    def vector(name, values):
        writer.add_tensor(name, np.asarray(values, dtype=np.float32))

    ones = lambda n: 1.0 + 0.1 * rng.standard_normal(n)
    matrix("token_embd.weight", Q.Q6_K, vocab, d)
    attention_blocks = [i for i, r in enumerate(recurrent) if not r]
    for i in range(shape["blocks"]):
        b = f"blk.{i}"
        vector(f"{b}.attn_norm.weight", ones(d))
        if recurrent[i]:
            matrix(f"{b}.attn_qkv.weight", Q.Q5_K, channels, d)
            matrix(f"{b}.attn_gate.weight", Q.Q4_K, value_dim, d)
            matrix(f"{b}.ssm_beta.weight", Q.Q4_K, delta["value_heads"], d)
            matrix(f"{b}.ssm_alpha.weight", Q.Q4_K, delta["value_heads"], d)
            vector(f"{b}.ssm_dt.bias", rng.normal(0, 0.5, delta["value_heads"]))
            vector(f"{b}.ssm_a", -np.exp(rng.uniform(-1, 1, delta["value_heads"])))
            writer.add_tensor(f"{b}.ssm_conv1d.weight",
                              rng.normal(0, 0.5, (channels, delta["kernel"])).astype(np.float32))
            vector(f"{b}.ssm_norm.weight", ones(delta["head_dim"]))
            matrix(f"{b}.ssm_out.weight", Q.Q4_K, d, value_dim)
        else:
            more = use_more_bits(attention_blocks.index(i), len(attention_blocks))
            matrix(f"{b}.attn_q.weight", Q.Q4_K, 2 * q_dim, d)
            matrix(f"{b}.attn_k.weight", Q.Q4_K, kv_dim, d)
            matrix(f"{b}.attn_v.weight", Q.Q6_K if more else Q.Q4_K, kv_dim, d)
            vector(f"{b}.attn_q_norm.weight", ones(shape["head_dim"]))
            vector(f"{b}.attn_k_norm.weight", ones(shape["head_dim"]))
            matrix(f"{b}.attn_output.weight", Q.Q4_K, d, q_dim)
        vector(f"{b}.post_attention_norm.weight", ones(d))
        matrix(f"{b}.ffn_gate.weight", Q.Q4_K, ffn, d)
        matrix(f"{b}.ffn_up.weight", Q.Q4_K, ffn, d)
        matrix(f"{b}.ffn_down.weight", Q.Q6_K if use_more_bits(i, shape["blocks"]) else Q.Q4_K, d, ffn)
    vector("output_norm.weight", ones(d))
    finish(writer, out)


def copy_tokenizer(writer, vocabulary):
    """Every `tokenizer.*` key of the file whose vocabulary the shape takes."""
    for field in vocabulary.fields.values():
        if field.name.startswith("tokenizer."):
            if field.types[0] == GGUFValueType.ARRAY:
                writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=field.types[-1])
            else:
                writer.add_key_value(field.name, field.contents(), field.types[0])


def write_gemma3(writer, rng, shape, vocab):
    """Gemma 3's tensors (norms stored as 1 + w, as the converter writes them) in Q4_K_M's types."""
    d, ffn, head_dim = shape["hidden"], shape["ffn"], shape["head_dim"]
    q_dim, kv_dim = shape["heads"] * head_dim, shape["kv_heads"] * head_dim

    def matrix(name, qtype, rows, cols):
        qtype = q4_k_m_type(qtype, cols)
        writer.add_tensor(name, random_blocks(rng, qtype, rows, cols), raw_dtype=qtype)

    def norm(name, n):
        writer.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", Q.Q6_K, vocab, d)
    for i in range(shape["blocks"]):
        b, more = f"blk.{i}", use_more_bits(i, shape["blocks"])
        norm(f"{b}.attn_norm.weight", d)
        matrix(f"{b}.attn_q.weight", Q.Q4_K, q_dim, d)
        matrix(f"{b}.attn_k.weight", Q.Q4_K, kv_dim, d)
        matrix(f"{b}.attn_v.weight", Q.Q6_K if more else Q.Q4_K, kv_dim, d)
        norm(f"{b}.attn_q_norm.weight", head_dim)
        norm(f"{b}.attn_k_norm.weight", head_dim)
        matrix(f"{b}.attn_output.weight", Q.Q4_K, d, q_dim)
        norm(f"{b}.post_attention_norm.weight", d)
        norm(f"{b}.ffn_norm.weight", d)
        matrix(f"{b}.ffn_gate.weight", Q.Q4_K, ffn, d)
        matrix(f"{b}.ffn_up.weight", Q.Q4_K, ffn, d)
        matrix(f"{b}.ffn_down.weight", Q.Q6_K if more else Q.Q4_K, d, ffn)
        norm(f"{b}.post_ffw_norm.weight", d)
    norm("output_norm.weight", d)


def finish(writer, out):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{out}: {pathlib.Path(out).stat().st_size} bytes")


if __name__ == "__main__":
    main()
