// www/protocol.js owns the API's error codes: every code the Rust engine and its wasm glue can
// produce is in ERROR_CODES, and README.md's table lists exactly ERROR_CODES. Plain Node, no
// browser.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import { ERROR_CODES, MODEL_CACHE, codedError, openModelCache, threadsProblem, webAssemblyProblem, wireError } from '../../www/protocol.js';

const root = new URL('../../', import.meta.url);
const read = (path) => readFileSync(new URL(path, root), 'utf8');
const codes = Object.keys(ERROR_CODES).sort();

test('every code of the engine and the wasm glue is in ERROR_CODES', () => {
  const engine = read('crates/engine/src/error.rs').match(/pub const CODES: \[&'static str; \d+\] =\s*\[([^\]]*)\]/);
  assert.ok(engine, 'EngineError::CODES in crates/engine/src/error.rs');
  const engineCodes = [...engine[1].matchAll(/"([a-z-]+)"/g)].map((m) => m[1]);
  assert.ok(engineCodes.length >= 8, engineCodes.join());
  const glueCodes = [...read('crates/web/src/bindings.rs').matchAll(/js_error\("([a-z-]+)"/g)].map((m) => m[1]);
  assert.ok(glueCodes.includes('no-webgpu') && glueCodes.includes('device-lost'), glueCodes.join());
  for (const code of [...engineCodes, ...glueCodes]) assert.ok(codes.includes(code), `${code} is not in ERROR_CODES`);
});

test("README's error table lists exactly ERROR_CODES", () => {
  const readme = read('README.md');
  const table = readme.slice(readme.indexOf('| code | when |'));
  const rows = table.slice(0, table.indexOf('\n\n')).split('\n').slice(2);
  const documented = rows.flatMap((row) => [...row.split('|')[1].matchAll(/`([a-z-]+)`/g)].map((m) => m[1]));
  assert.deepEqual(documented.sort(), codes);
});

test('an unknown code becomes internal, naming it', () => {
  const error = codedError('no-such-code', 'something failed');
  assert.equal(error.code, 'internal');
  assert.match(error.message, /no-such-code/);
  const known = codedError('bad-options', 'topP must be in (0, 1]', { option: 'topP' });
  assert.deepEqual([known.code, known.option], ['bad-options', 'topP']);
});

test("an error crosses to the page with its code; a trap, or an object a trap left borrowed, is the engine's crash", () => {
  const noPanic = () => null;
  assert.deepEqual(wireError(codedError('bad-options', 'topP must be in (0, 1]', { option: 'topP' }), noPanic),
    { code: 'bad-options', message: 'topP must be in (0, 1]', option: 'topP' });
  assert.deepEqual(wireError(new Error('plain'), noPanic), { code: 'internal', message: 'plain' });
  const trap = wireError(new WebAssembly.RuntimeError('Out of bounds memory access'), noPanic);
  assert.deepEqual([trap.code, trap.crashed], ['internal', true]);
  assert.match(trap.message, /the engine crashed: Out of bounds memory access/);
  const panic = wireError(new WebAssembly.RuntimeError('unreachable'), () => 'index out of bounds at model.rs:10');
  assert.match(panic.message, /the engine crashed: index out of bounds at model\.rs:10/);
  // After a trap, wasm-bindgen's borrow checks fail on the object the trapped call held.
  for (const words of ['recursive use of an object detected which would lead to unsafe aliasing in rust',
    'attempted to take ownership of Rust value while it was borrowed']) {
    const left = wireError(new Error(words), () => assert.fail('no panic is asked for a borrow'));
    assert.deepEqual([left.code, left.crashed], ['internal', true], words);
    assert.match(left.message, /the engine crashed earlier/);
  }
});

test('threads start only where the page can share memory with its workers, and the reason says what is missing', () => {
  const isolated = { crossOriginIsolated: true, SharedArrayBuffer, WebAssembly, MessageChannel };
  // Node can share: its workers take a shared WebAssembly memory.
  assert.equal(threadsProblem(isolated), null);
  assert.match(threadsProblem({ ...isolated, crossOriginIsolated: false }), /not cross-origin isolated/);
  // WebKitGTK: isolated, but no SharedArrayBuffer.
  assert.match(threadsProblem({ ...isolated, SharedArrayBuffer: undefined }), /no SharedArrayBuffer, though the page is cross-origin isolated/);
  // A shared memory that cannot be handed over (what WebKit's DataCloneError said after the fact).
  class RefusingChannel {
    constructor() {
      const refuse = () => { throw new DOMException('The object can not be cloned.', 'DataCloneError'); };
      this.port1 = { postMessage: refuse, close() {} };
      this.port2 = { close() {} };
    }
  }
  assert.equal(threadsProblem({ ...isolated, MessageChannel: RefusingChannel }),
    'this browser cannot hand a shared WebAssembly memory to another worker (DataCloneError: The object can not be cloned.)');
});

test('without WebAssembly, or its SIMD, the page is told so, and a worker still answers with its error', () => {
  assert.equal(webAssemblyProblem({ WebAssembly }), null);
  assert.match(webAssemblyProblem({}), /runs no WebAssembly/);
  assert.match(webAssemblyProblem({ WebAssembly: { validate: () => false } }), /WebAssembly has no SIMD/);
  // A page whose policy lacks 'wasm-unsafe-eval': the browser validates a module but will not compile it.
  const Module = function Module() { throw new WebAssembly.CompileError("violates the policy: 'unsafe-eval' is not allowed"); };
  assert.match(webAssemblyProblem({ WebAssembly: { validate: WebAssembly.validate, Module, Instance: WebAssembly.Instance } }),
    /Content Security Policy does not let it compile WebAssembly: its `script-src` needs 'wasm-unsafe-eval' \(the browser said: violates/);
  const Instance = function Instance() { throw new Error("Refused to create a WebAssembly object because 'wasm-unsafe-eval' is not allowed"); };
  assert.match(webAssemblyProblem({ WebAssembly: { validate: WebAssembly.validate, Module: WebAssembly.Module, Instance } }),
    /its `script-src` needs 'wasm-unsafe-eval' \(the browser said: Refused to create/);
  // A worker whose browser has no WebAssembly: its failures still become replies.
  const saved = globalThis.WebAssembly;
  delete globalThis.WebAssembly;
  try {
    assert.equal(webAssemblyProblem(), webAssemblyProblem({}));
    assert.deepEqual(wireError(new ReferenceError('WebAssembly is not defined'), () => null),
      { code: 'internal', message: 'WebAssembly is not defined' });
  } finally {
    globalThis.WebAssembly = saved;
  }
});

test("the models' cache is none where the Cache API is missing or refuses, as in a sandboxed frame", async () => {
  const cache = { keys: async () => [] };
  const opened = [];
  const caches = { open: async (name) => { opened.push(name); return cache; } };
  assert.equal(await openModelCache({ caches }), cache);
  assert.deepEqual(opened, [MODEL_CACHE]);
  assert.equal(await openModelCache({}), null);
  // Chromium and WebKit: reading `caches` throws; Firefox: opening one rejects.
  const refused = () => { throw new DOMException('Cache storage is disabled because the context is sandboxed', 'SecurityError'); };
  assert.equal(await openModelCache(Object.defineProperty({}, 'caches', { get: refused })), null);
  assert.equal(await openModelCache({ caches: { open: async () => refused() } }), null);
});
