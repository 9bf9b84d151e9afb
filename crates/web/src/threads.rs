//! The threaded build's helpers (shared memory, a cross-origin isolated page): the CPU engine's
//! pool ([`nucleus_cpu::help`]) runs on Web Workers that the page starts, each instantiating this
//! same module on the same memory and then calling `runThreadHelper`, which never returns.
//!
//! The engine's worker does not start them itself: Firefox's `new Worker` inside a worker blocked
//! that worker for good about one start in a hundred (measured: 16 of 1,700 starts), so the page,
//! whose `new Worker` needs no such round trip, starts them (`www/nucleus.js`), and the engine
//! never waits on them (a task no helper claims, the caller runs).

use wasm_bindgen::prelude::*;

/// What a helper worker needs to instantiate this module on its memory: the compiled module.
#[wasm_bindgen(js_name = compiledModule)]
pub fn wasm_module() -> JsValue {
    wasm_bindgen::module()
}

/// Split the CPU engine's work for `helpers` threads besides the engine's own.
#[wasm_bindgen(js_name = expectThreadHelpers)]
pub fn expect_thread_helpers(helpers: usize) {
    nucleus_cpu::expect_helpers(helpers);
}

/// The helper workers that have started (called `runThreadHelper`).
#[wasm_bindgen(js_name = threadHelpersRunning)]
pub fn thread_helpers_running() -> usize {
    nucleus_cpu::helpers_running()
}

/// A helper worker's life: takes the CPU engine's tasks; never returns.
#[wasm_bindgen(js_name = runThreadHelper)]
pub fn run_thread_helper() {
    nucleus_cpu::help()
}
