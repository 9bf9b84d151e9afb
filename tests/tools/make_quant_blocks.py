#!/usr/bin/env python3
"""Random GGML blocks of every type nucleus-gguf dequantizes, with their values as gguf-py (the
Python package of llama.cpp's repository, an independent implementation) dequantizes them.

Writes crates/gguf/tests/fixtures/quant-blocks.json, read by crates/gguf/tests/against_gguf_py.rs.
Scales are random finite halves (a random f16 could be NaN or infinite); every other byte is random.

    pip install gguf==0.19.0 numpy && python3 tests/tools/make_quant_blocks.py
"""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# (type, byte offsets of its f16 scales within a block)
TYPES = [
    (T.Q4_0, [0]), (T.Q4_1, [0, 2]), (T.Q5_0, [0]), (T.Q5_1, [0, 2]), (T.Q8_0, [0]),
    (T.Q4_K, [0, 2]), (T.Q5_K, [0, 2]), (T.Q6_K, [208]),
]
BLOCKS = 3

rng = np.random.default_rng(20261125)
cases = []
for qtype, scale_offsets in TYPES:
    elements, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(BLOCKS, size), dtype=np.uint8)
    for offset in scale_offsets:
        scales = rng.uniform(-0.05, 0.05, size=BLOCKS).astype(np.float16)
        raw[:, offset:offset + 2] = scales.view(np.uint8).reshape(BLOCKS, 2)
    values = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
    assert values.size == BLOCKS * elements and np.isfinite(values).all()
    cases.append({
        "type": qtype.name,
        "elements": int(values.size),
        "bytes": raw.reshape(-1).tobytes().hex(),
        # f32 bits, exactly as gguf-py computes them.
        "values": [int(v) for v in values.view(np.uint32)],
    })

out = pathlib.Path(__file__).resolve().parents[2] / "crates/gguf/tests/fixtures/quant-blocks.json"
out.write_text(json.dumps({"made_by": "tests/tools/make_quant_blocks.py", "cases": cases}) + "\n")
print(f"wrote {out}: {', '.join(c['type'] for c in cases)}")
