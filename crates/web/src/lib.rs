//! The browser's side of Nucleus: the [engine](nucleus_engine) behind a small wasm-bindgen API,
//! driven by the Web Worker in `www/nucleus-worker.js` (the page talks to the worker through
//! `www/nucleus.js`).
//!
//! Everything that crosses into JS is JSON text: the generation options are read by the engine's
//! [`GenerateRequest::from_json`](nucleus_engine::GenerateRequest::from_json) (every error names
//! the option in its JS spelling), and [`shapes`] writes steps and results with camelCase keys.
//! Both are platform-neutral and tested natively; the bindings themselves exist only on wasm32.
//!
//! Nothing on this path reads the device synchronously: device creation is
//! `init_with_setup_async`, and every read in the engine is `into_data_async`.

pub mod shapes;

#[cfg(target_arch = "wasm32")]
mod bindings;
#[cfg(target_arch = "wasm32")]
mod model_file;

#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
mod threads;
