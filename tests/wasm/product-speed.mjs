// Times the CPU engine's products built for wasm32 (crates/cpu/examples/wasm_product_speed.rs,
// whose doc has the build command) in Node's V8, one thread: per format and shape, the best of
// several runs of each way of summing byte products, alternating (with relaxed SIMD; one column
// without), in GMAC/s. A measurement, not a test.
// Usage: node tests/wasm/product-speed.mjs path/to/wasm_product_speed.wasm [FORMAT:ROWS:COLS[:N] ...]
import { readFile } from 'node:fs/promises';
import v8 from 'node:v8';

// As in cpu-parity.mjs: Node 20 validates relaxed SIMD behind this flag, and its baseline
// compiler gets the byte dot product wrong; the optimising compiler alone.
v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
v8.setFlagsFromString('--no-liftoff');

const FORMATS = ['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q4_K', 'Q5_K', 'Q6_K', 'F16'];
const WAYS = ['accumulating', 'paired'];
const DEFAULT_SHAPES = ['Q4_1:1536:576', 'Q8_0:1536:576', 'Q4_0:2048:640', 'Q5_0:2048:640', 'Q4_K:3584:1024',
  'Q5_K:3584:1024', 'Q6_K:3584:1024', 'Q6_K:248320:1024'];
const RUNS = 9;
/** Each timed run lasts about this long. */
const RUN_MS = 20;

const [wasmPath, ...given] = process.argv.slice(2);
if (!wasmPath) throw new Error('usage: node tests/wasm/product-speed.mjs WASM [FORMAT:ROWS:COLS[:N] ...]');
const { instance } = await WebAssembly.instantiate(await readFile(wasmPath), {});
const { prepare, choose, choices, run } = instance.exports;
const ways = choices() > 0 ? WAYS : ['(one way)'];
console.log(`| product | ${ways.map((w) => `${w} GMAC/s`).join(' | ')} |`);
console.log(`|---|${ways.map(() => '---:').join('|')}|`);
for (const shape of given.length ? given : DEFAULT_SHAPES) {
  const [format, rows, cols, n = '1'] = shape.split(':');
  const index = FORMATS.indexOf(format);
  if (index < 0) throw new Error(`${format} is not one of ${FORMATS.join(', ')}`);
  prepare(index, Number(rows), Number(cols), Number(n));
  const macs = Number(rows) * Number(cols) * Number(n);
  // Enough repeats for RUN_MS, from one untimed product per way.
  let times = 1;
  for (let w = 0; w < ways.length; w += 1) {
    if (choices() > 0) choose(w);
    const started = performance.now();
    run(1);
    times = Math.max(1, Math.round(RUN_MS / Math.max(performance.now() - started, 1e-3)));
  }
  const best = ways.map(() => Infinity);
  for (let r = 0; r < RUNS; r += 1) {
    for (let w = 0; w < ways.length; w += 1) {
      if (choices() > 0) choose(w);
      const started = performance.now();
      run(times);
      best[w] = Math.min(best[w], (performance.now() - started) / times);
    }
  }
  console.log(`| ${format} ${rows} × ${cols}${n === '1' ? '' : `, ${n} rows`} | ${best.map((ms) => (macs / ms / 1e6).toFixed(2)).join(' | ')} |`);
}
