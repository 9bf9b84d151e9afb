// Times the CPU engine's products built for wasm32 (crates/cpu/examples/wasm_product_speed.rs,
// whose doc has the build command), one thread: per format and shape, the best of several runs of
// each way of summing byte products, alternating (with relaxed SIMD; one column without), in
// GMAC/s. In Node's V8, or in a page of Chromium (`--chromium`: its V8 is newer than Node's and
// compiles the same module differently), Firefox (`--firefox`) or WebKit (`--webkit`: WebKitGTK's
// JavaScriptCore, Safari's engine; plain SIMD only). A measurement, not a test.
// Usage: node tests/wasm/product-speed.mjs [--chromium | --firefox | --webkit] path/to/wasm_product_speed.wasm [FORMAT:ROWS:COLS[:N] ...]
import { readFile } from 'node:fs/promises';
import v8 from 'node:v8';

const DEFAULT_SHAPES = ['Q4_1:1536:576', 'Q8_0:1536:576', 'Q4_0:2048:640', 'Q5_0:2048:640', 'Q4_K:3584:1024',
  'Q5_K:3584:1024', 'Q6_K:3584:1024', 'Q6_K:248320:1024'];

/**
 * The table's lines for `shapes`, from the module's bytes in base64: self-contained, since it also
 * runs in a page.
 */
async function measure(wasm, shapes) {
  const FORMATS = ['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q4_K', 'Q5_K', 'Q6_K', 'F16'];
  const WAYS = ['accumulating', 'paired'];
  const RUNS = 9;
  // Each timed run lasts about this long.
  const RUN_MS = 20;
  const bytes = Uint8Array.from(atob(wasm), (c) => c.charCodeAt(0));
  const { instance } = await WebAssembly.instantiate(bytes, {});
  const { prepare, choose, choices, run } = instance.exports;
  const ways = choices() > 0 ? WAYS : ['(one way)'];
  const lines = [`| product | ${ways.map((w) => `${w} GMAC/s`).join(' | ')} |`, `|---|${ways.map(() => '---:').join('|')}|`];
  for (const shape of shapes) {
    const [format, rows, cols, n = '1'] = shape.split(':');
    const index = FORMATS.indexOf(format);
    if (index < 0) throw new Error(`${format} is not one of ${FORMATS.join(', ')}`);
    prepare(index, Number(rows), Number(cols), Number(n));
    const macs = Number(rows) * Number(cols) * Number(n);
    // Enough repeats for RUN_MS, doubled until a run lasts that long (a page's clock may tick
    // only every millisecond, as Firefox's does without cross-origin isolation).
    let times = 1;
    for (let w = 0; w < ways.length; w += 1) {
      if (choices() > 0) choose(w);
      for (;;) {
        const started = performance.now();
        run(times);
        if (performance.now() - started >= RUN_MS) break;
        times *= 2;
      }
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
    lines.push(`| ${format} ${rows} × ${cols}${n === '1' ? '' : `, ${n} rows`} | ${best.map((ms) => (macs / ms / 1e6).toFixed(2)).join(' | ')} |`);
  }
  return lines;
}

const args = process.argv.slice(2);
const browser = ['--chromium', '--firefox', '--webkit'].includes(args[0]) ? args.shift().slice(2) : null;
const [wasmPath, ...given] = args;
if (!wasmPath) throw new Error('usage: node tests/wasm/product-speed.mjs [--chromium | --firefox | --webkit] WASM [FORMAT:ROWS:COLS[:N] ...]');
// Base64: the module crosses to a page as one string.
const wasm = (await readFile(wasmPath)).toString('base64');
const shapes = given.length ? given : DEFAULT_SHAPES;
let lines;
if (browser) {
  // A blank page of the cross-engine suite's engine (browser.mjs), `measure` evaluated there from
  // its text, since a function does not cross to the page.
  const { ENGINES } = await import('../browser/browser.mjs');
  const engine = await ENGINES[browser].launch();
  try {
    const page = await engine.open('about:blank');
    const inPage = ({ measure, wasm, shapes }) => (0, eval)(`(${measure})`)(wasm, shapes);
    lines = await page.run(inPage, { measure: measure.toString(), wasm, shapes });
    await page.close();
  } finally {
    await engine.close();
  }
} else {
  // As in cpu-parity.mjs: Node 20 validates relaxed SIMD behind this flag, and its baseline
  // compiler gets the byte dot product wrong; the optimising compiler alone.
  v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
  v8.setFlagsFromString('--no-liftoff');
  lines = await measure(wasm, shapes);
}
console.log(lines.join('\n'));
