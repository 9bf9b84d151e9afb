// Runs the sampler's determinism probe compiled to wasm32-unknown-unknown and compares its ids
// with tests/fixtures/sampler-determinism.json, which the native build is also checked against.
// Usage: node tests/wasm/sampler-determinism.mjs path/to/determinism_probe.wasm
import { readFile } from 'node:fs/promises';

const [wasmPath] = process.argv.slice(2);
const fixtureUrl = new URL('../fixtures/sampler-determinism.json', import.meta.url);
const { ids: recorded } = JSON.parse(await readFile(fixtureUrl, 'utf8'));
const { instance } = await WebAssembly.instantiate(await readFile(wasmPath), {});
const { memory, probe, probe_len: probeLen } = instance.exports;

const count = probeLen();
// Scratch space past the module's data: grow by enough pages and write there.
const offset = memory.grow(Math.ceil((count * 4) / 65536)) * 65536;
probe(offset);
const ids = Array.from(new Uint32Array(memory.buffer, offset, count));

const mismatches = ids.map((id, i) => [i, id, recorded[i]]).filter(([, a, b]) => a !== b);
if (ids.length !== recorded.length || mismatches.length > 0) {
  console.error(`wasm32 sampler draws differ from native at ${mismatches.length} of ${recorded.length} positions`, mismatches.slice(0, 5));
  console.log('0 passed, 1 failed');
  process.exit(1);
}
console.log(`wasm32 sampler: ${ids.length} seeded draws identical to native`);
