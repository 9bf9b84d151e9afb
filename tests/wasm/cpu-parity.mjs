// Runs the CPU engine's products, attention and element-wise functions against their reference
// (crates/cpu/examples/kernel_parity.rs) compiled to wasm32-unknown-unknown: the WebAssembly SIMD and relaxed SIMD kernels, which no
// native test compiles.
// Usage: node tests/wasm/cpu-parity.mjs path/to/kernel_parity.wasm NAME
import { readFile } from 'node:fs/promises';
import v8 from 'node:v8';

// Node 20 validates relaxed SIMD behind this flag (later versions by default), and its baseline
// compiler (Liftoff) gets i32x4.relaxed_dot_i8x16_i7x16_add_s wrong there: twice the sum, measured
// on a probe, where its optimising compiler, Chromium 156 and Firefox 153 give the sum. So the
// optimising compiler alone.
v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
v8.setFlagsFromString('--no-liftoff');

const [wasmPath, name] = process.argv.slice(2);
const { instance } = await WebAssembly.instantiate(await readFile(wasmPath), {});
const { memory, failures: run } = instance.exports;
// Room for the first failures' text past the module's data.
const cap = 65536;
const at = memory.grow(1) * 65536;
const result = run(at, cap);
const failures = Number(result >> 32n);
if (failures > 0) {
  const text = new TextDecoder().decode(new Uint8Array(memory.buffer, at, Number(result & 0xffffffffn)));
  console.error(`wasm32 (${name}): ${failures} outputs off the reference, first:\n${text}`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}
console.log(`wasm32 (${name}): every format's products, the attention and the element-wise functions equal the reference`);
