#!/usr/bin/env python3
"""The code of a wasm module by crate, from its name section: bytes, and gzip -9 of each crate's
functions on their own (the sum exceeds the module's gzipped size; the ranking is what matters).

    python3 tests/tools/wasm_sizes.py "$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/nucleus_web.wasm" [ROWS]

Run it on cargo's output (before wasm-bindgen and wasm-opt, which drop the names)."""
import sys, re, zlib, gzip, collections

def leb(b, i):
    r = s = 0
    while True:
        x = b[i]; i += 1
        r |= (x & 0x7f) << s; s += 7
        if x < 0x80: return r, i

def crate_of(name):
    if name.startswith('_ZN'):
        i = 3; m = re.match(r'\d+', name[i:])
        if m:
            n = int(m.group()); seg = name[i+len(m.group()):i+len(m.group())+n]
            name = seg
            if not seg.startswith('_$LT$'): return seg
    if name.startswith('_$LT$') or name.startswith('<'):
        rest = name.replace('_$LT$', '', 1).lstrip('<')
        rest = re.sub(r'^(\$RF\$|mut\$u20\$|\$u5b\$|&|mut |\[|dyn\$u20\$)+', '', rest)
        m = re.match(r'([A-Za-z_][A-Za-z0-9_]*)(\.\.|::)', rest)
        if m: return m.group(1)
    if name.startswith('_R'):
        m = re.search(r'C[s0-9_]*?(\d+)([a-z_][a-z0-9_]*)', name)
        if m: return m.group(2)[:int(m.group(1))]
    m = re.match(r'<?([a-z_][a-z0-9_]*)::', name)
    if m: return m.group(1)
    return '(unnamed or C)'

b = open(sys.argv[1], 'rb').read()
i = 8; sections = {}; bodies = []; names = {}; imports_funcs = 0; data = 0
while i < len(b):
    sid = b[i]; i += 1; size, i = leb(b, i); start = i; end = i + size
    if sid == 2:
        n, j = leb(b, i)
        for _ in range(n):
            l, j = leb(b, j); j += l; l, j = leb(b, j); j += l; kind = b[j]; j += 1
            if kind == 0: _, j = leb(b, j); imports_funcs += 1
            elif kind == 1: j += 1; fl, j = leb(b, j); _, j = leb(b, j); j = leb(b, j)[1] if fl & 1 else j
            elif kind == 2: fl, j = leb(b, j); _, j = leb(b, j); j = leb(b, j)[1] if fl & 1 else j
            elif kind == 3: j += 2
    elif sid == 10:
        n, j = leb(b, i)
        for _ in range(n):
            l, j2 = leb(b, j); bodies.append((j2, l)); j = j2 + l
    elif sid == 11:
        data = size
    elif sid == 0:
        l, j = leb(b, i); nm = b[j:j+l].decode(); j += l
        if nm == 'name':
            while j < end:
                sub = b[j]; j += 1; sl, j = leb(b, j); se = j + sl
                if sub == 1:
                    n, k = leb(b, j)
                    for _ in range(n):
                        idx, k = leb(b, k); l2, k = leb(b, k); names[idx] = b[k:k+l2].decode('utf8', 'replace'); k += l2
                j = se
    i = end
by = collections.defaultdict(lambda: [0, bytearray()])
for n, (off, l) in enumerate(bodies):
    c = crate_of(names.get(n + imports_funcs, ''))
    by[c][0] += l; by[c][1] += b[off:off+l]
total = sum(v[0] for v in by.values())
print(f"code {total/1e6:.2f} MB in {len(bodies)} functions, data {data/1e6:.2f} MB, file {len(b)/1e6:.2f} MB")
rows = sorted(by.items(), key=lambda kv: -kv[1][0])
for c, (n, blob) in rows[:int(sys.argv[2]) if len(sys.argv) > 2 else 30]:
    print(f"{n/1e3:10.0f} kB  gz {len(gzip.compress(bytes(blob), 9))/1e3:8.0f} kB  {c}")
