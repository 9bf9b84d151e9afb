//! The wasm-bindgen exports the worker calls: [`load_engine`] and [`WasmEngine`].
//!
//! Errors reach JS as `Error` objects with a stable `code` (and `option`, for `bad-options`).

use std::cell::RefCell;
use std::fmt::Display;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use nucleus_engine::{
    AttentionRequest, BeamRequest, Engine, EngineError, GenerateRequest, GenerationState, GgufError, GgufHeader,
    HostLimit, LensRequest, LoadOptions, ModelDevice, OptionError, PrefillProgress, ScoreRequest, js_name,
    js_option_error,
};
use nucleus_model::{LoadProgress, WASM32_MEMORY_BYTES};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::model_file::ModelFile;
use crate::shapes;

#[cfg(feature = "gpu")]
thread_local! {
    /// The one wgpu device of this worker (Burn's runtime can be initialised once).
    static DEVICE: RefCell<Option<ModelDevice>> = const { RefCell::new(None) };
}

thread_local! {
    /// The message of the last Rust panic, for the worker to report.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(message: &str);
}

unsafe extern "C" {
    /// Synthesised by the wasm linker: runs every static constructor (cubecl registers its IR
    /// dialects with `inventory`, whose registrations are constructors).
    fn __wasm_call_ctors();
}

/// Runs when the module is instantiated (wasm-bindgen's start function): once in the plain build;
/// in the threaded build, on every thread that instantiates the shared module, of which only the
/// first does anything.
#[wasm_bindgen(start)]
fn start() {
    static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if STARTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    // Run the constructors here, once. Without an explicit call the linker treats the module as
    // a "command" and wraps every export to run all constructors on each call: every step, every
    // promise continuation re-ran them, which took most of a decode step in Chromium (measured:
    // 5 s of a 5.3 s step on SwiftShader).
    // SAFETY: called once (the flag above), before any other export; the constructors only
    // register statics.
    unsafe { __wasm_call_ctors() };
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        console_error(&message);
        LAST_PANIC.with(|last| *last.borrow_mut() = Some(message));
    }));
}

/// The message of the last Rust panic (after which this wasm instance is unusable), if any.
#[wasm_bindgen(js_name = lastPanic)]
pub fn last_panic() -> Option<String> {
    LAST_PANIC.with(|last| last.borrow().clone())
}

/// A JS `Error` with a stable `code`.
pub(crate) fn js_error(code: &str, message: impl Display) -> JsValue {
    let error = js_sys::Error::new(&message.to_string());
    // Setting a property on a fresh Error object cannot fail.
    let _ = Reflect::set(&error, &"code".into(), &code.into());
    error.into()
}

pub(crate) fn engine_error(error: EngineError) -> JsValue {
    // A load option (`contextLength`) is named as JS spells it.
    if let EngineError::BadOption { name, allowed, got } = &error {
        let option = js_name(name);
        return option_error(OptionError { message: format!("{option} must be {allowed}, got {got}"), option });
    }
    // A response format that does not compile is named too (`responseFormat`).
    if let EngineError::BadConstraint { .. } = &error {
        return option_error(js_option_error(error));
    }
    let message = error.to_string();
    match error.code() {
        // cubecl marks the device poisoned when wgpu reports it lost; reads then fail with that.
        "device" if message.to_lowercase().contains("poisoned") || message.contains("lost") => {
            js_error("device-lost", message)
        }
        code => js_error(code, message),
    }
}

fn option_error(error: OptionError) -> JsValue {
    let value = js_error("bad-options", &error.message);
    let _ = Reflect::set(&value, &"option".into(), &error.option.as_str().into());
    value
}

/// The worker's wgpu device, created on first use with WebGPU (asynchronously: the browser has
/// no synchronous adapter request).
#[cfg(feature = "gpu")]
async fn device() -> Result<ModelDevice, JsValue> {
    if let Some(device) = DEVICE.with(|d| d.borrow().clone()) {
        return Ok(device);
    }
    let device = ModelDevice::wgpu_async().await.map_err(|e| js_error("no-webgpu", e))?;
    DEVICE.with(|d| *d.borrow_mut() = Some(device.clone()));
    Ok(device)
}

/// Panics inside the engine, as a bug would: for tests of a crashed worker (the panic becomes a
/// trap; the worker reports it as `internal` with this message and is replaced).
#[wasm_bindgen(js_name = panicForTesting)]
pub fn panic_for_testing() {
    panic!("a panic for testing (panicForTesting)");
}

/// Destroys the WebGPU device, as a driver reset would: for tests of the `device-lost` error.
#[wasm_bindgen(js_name = loseDeviceForTesting)]
pub fn lose_device_for_testing() {
    #[cfg(feature = "gpu")]
    DEVICE.with(|d| {
        if let Some(gpu) = d.borrow().as_ref().and_then(ModelDevice::gpu) {
            gpu.device().destroy();
        }
    });
}

/// Parses the GGUF `file` (its bytes stay where they are: the CPU engine reads its matrices
/// there), checks what the model will hold against the device's limits and `memory_budget`
/// (bytes, all buffers together), uploads the weights and allocates the KV cache
/// (`context_length` positions, default the model's). `backend`: `"webgpu"` (the fused kernels on
/// the worker's WebGPU device) or `"cpu"` (the CPU engine in this module; WebGPU is not touched).
/// `on_progress(phase, loaded, total)` is called with phase `"parse"` once, then `"upload"` per
/// tensor, in bytes of the file. Resolves to a [`WasmEngine`]; the file is read-only after. A
/// file streamed to WebGPU ([`ModelFile::streaming`]) has had its tensors uploaded as they
/// arrived: the load is finished (its own options stand).
#[wasm_bindgen(js_name = loadEngine, unchecked_return_type = "Promise<WasmEngine>")]
pub fn load_engine(
    file: &mut ModelFile,
    backend: String,
    context_length: Option<u32>,
    memory_budget: Option<f64>,
    on_progress: Function,
) -> Promise {
    #[cfg(feature = "gpu")]
    if let Some(stream) = file.take_stream() {
        return future_to_promise(async move {
            let LoadProgress { bytes_total, .. } = stream.progress();
            let total = (bytes_total as f64).into();
            let _ = on_progress.call3(&JsValue::NULL, &"upload".into(), &total, &total);
            let engine = stream.finish().map_err(engine_error)?;
            Ok(WasmEngine::new(engine).into())
        });
    }
    let bytes = file.shared();
    future_to_promise(async move {
        let device = backend_device(&backend).await?;
        let total = bytes.len() as f64;
        let _ = on_progress.call3(&JsValue::NULL, &"parse".into(), &0.into(), &total.into());
        let options = load_options(context_length, memory_budget);
        let engine = Engine::load_shared(&bytes, &device, options, |p: LoadProgress| {
            let _ = on_progress.call3(
                &JsValue::NULL,
                &"upload".into(),
                &(p.bytes_done as f64).into(),
                &(p.bytes_total as f64).into(),
            );
        })
        .map_err(engine_error)?;
        Ok(WasmEngine::new(engine).into())
    })
}

/// The device a load on `backend` runs on: `"webgpu"` (the worker's WebGPU device) or `"cpu"`.
async fn backend_device(backend: &str) -> Result<ModelDevice, JsValue> {
    match backend {
        #[cfg(feature = "gpu")]
        "webgpu" => device().await,
        #[cfg(not(feature = "gpu"))]
        "webgpu" => Err(js_error("no-webgpu", "this build of the engine (the threaded CPU engine) has no WebGPU")),
        "cpu" => Ok(ModelDevice::cpu()),
        #[cfg(feature = "burn-cpu")]
        "burn-cpu" => Ok(ModelDevice::burn_cpu()),
        other => Err(option_error(OptionError {
            message: format!("backend must be 'webgpu' or 'cpu' here, got {other:?}"),
            option: "backend".into(),
        })),
    }
}

pub(crate) fn load_options(context_length: Option<u32>, memory_budget: Option<f64>) -> LoadOptions {
    LoadOptions {
        context_length: context_length.map(|n| n as usize),
        memory_budget: memory_budget.map(|n| n as u64),
        ..LoadOptions::default()
    }
}

/// Makes `backend`'s device ahead of a load (the WebGPU device, asynchronously), so that
/// [`plan_load`] can plan on it: the worker calls it before the download when it loads on WebGPU.
#[wasm_bindgen(js_name = prepareBackend)]
pub async fn prepare_backend(backend: String) -> Result<(), JsValue> {
    backend_device(&backend).await.map(|_| ())
}

/// `backend`'s device when it is at hand without waiting: the CPU, or the WebGPU device
/// [`prepare_backend`] made.
pub(crate) fn ready_device(backend: &str) -> Result<ModelDevice, JsValue> {
    match backend {
        #[cfg(feature = "gpu")]
        "webgpu" => DEVICE
            .with(|d| d.borrow().clone())
            .ok_or_else(|| js_error("internal", "the WebGPU device is made (prepareBackend) before a load is planned")),
        "cpu" => Ok(ModelDevice::cpu()),
        // The worker asks with a backend its choice gave (webgpu or cpu); anything else is a bug.
        _ => Err(js_error("internal", format!("no device is prepared for the backend {backend:?}"))),
    }
}

/// What loading the model whose file begins with the bytes `file` holds so far (`file_length`
/// bytes in all) takes on `backend`, checked as the load will check it and against this browser's
/// WebAssembly memory, before the rest of the file is downloaded: the plan as JSON (`LoadPlan`,
/// camelCase), or `{"needBytes": n}` when those bytes end inside the header (read `n` bytes and
/// ask again). A model that cannot run here is refused with the load's typed error:
/// `out-of-memory` naming the context that would fit, `unsupported-model`, `bad-model`,
/// `bad-options`. Synchronous (called between a download's chunks): on WebGPU after
/// [`prepare_backend`].
#[wasm_bindgen(js_name = planLoad)]
pub fn plan_load(
    file: &ModelFile,
    file_length: f64,
    backend: &str,
    context_length: Option<u32>,
    memory_budget: Option<f64>,
) -> Result<String, JsValue> {
    let prefix = file.first_part();
    let device = ready_device(backend)?;
    let file_length = file_length as u64;
    let header = match GgufHeader::parse(prefix, file_length) {
        Err(GgufError::Truncated { needed, len, .. }) if len == prefix.len() as u64 && needed <= file_length => {
            return Ok(serde_json::json!({ "needBytes": needed }).to_string());
        }
        parsed => parsed.map_err(|e| engine_error(e.into()))?,
    };
    let plan =
        nucleus_engine::plan(&header, &device, &load_options(context_length, memory_budget), Some(wasm_memory()))
            .map_err(engine_error)?;
    Ok(serde_json::to_string(&plan).expect("a plan serializes"))
}

/// This browser's WebAssembly memory, as a plan checks it.
pub(crate) fn wasm_memory() -> HostLimit<'static> {
    HostLimit { bytes: WASM32_MEMORY_BYTES, name: "this browser's WebAssembly memory" }
}

/// The ways this build can sum its byte products (`nucleus_cpu::ByteDot`) by name: two in the
/// relaxed SIMD build (the threaded one the worker picks in Chromium and Firefox), none in the
/// others. The worker times each with [`byte_dot_probe`] at load.
#[wasm_bindgen(js_name = byteDotChoices)]
pub fn byte_dot_choices() -> Vec<String> {
    nucleus_cpu::byte_dot_choices().iter().map(|(_, name)| name.to_string()).collect()
}

/// Sums the byte products as `name` (one of [`byte_dot_choices`]) from here on, on every thread.
#[wasm_bindgen(js_name = setByteDot)]
pub fn set_byte_dot(name: &str) -> Result<(), JsValue> {
    let choice = nucleus_cpu::ByteDot::from_name(name)
        .filter(|choice| nucleus_cpu::byte_dot_choices().iter().any(|(c, _)| c == choice))
        .ok_or_else(|| JsValue::from_str(&format!("'{name}' is not one of this module's byte products")))?;
    nucleus_cpu::set_byte_dot(choice);
    Ok(())
}

/// One decode-shaped product for the worker to time (`nucleus_cpu::byte_dot_probe`).
#[wasm_bindgen(js_name = byteDotProbe)]
pub fn byte_dot_probe() -> f32 {
    nucleus_cpu::byte_dot_probe()
}

/// The most bytes a WebAssembly memory holds (4 GiB): what the CPU engine holds, the file's copy
/// among it (on WebGPU the header and the tensor being received).
#[wasm_bindgen(js_name = wasmMemoryLimit)]
pub fn wasm_memory_limit() -> f64 {
    WASM32_MEMORY_BYTES as f64
}

struct Inner {
    engine: Engine,
    /// The current generation; one at a time (the KV cache is the engine's).
    generation: Option<GenerationState>,
    /// The last step's raw logits row, when the generation asked for it (`returnLogits`).
    last_logits: Option<Vec<f32>>,
}

/// A loaded model and its current generation.
#[wasm_bindgen]
pub struct WasmEngine {
    inner: Rc<RefCell<Inner>>,
}

impl WasmEngine {
    fn new(engine: Engine) -> Self {
        WasmEngine { inner: Rc::new(RefCell::new(Inner { engine, generation: None, last_logits: None })) }
    }
}

#[wasm_bindgen]
impl WasmEngine {
    /// One decode step on a throwaway one-position cache (the first token id at position 0),
    /// its logits dropped: what the worker times at each thread count to keep the threads that
    /// measurably help (`measuredThreads` in www/nucleus-worker.js). The engine's cache is untouched.
    #[wasm_bindgen(js_name = scratchStep)]
    pub fn scratch_step(&self) -> Result<(), JsValue> {
        let inner = self.inner.try_borrow().map_err(|_| busy())?;
        let model = inner.engine.model();
        let mut cache = model.new_cache(1).map_err(|e| engine_error(e.into()))?;
        model.forward(&[0], &mut cache, nucleus_model::Logits::Last).map_err(|e| engine_error(e.into()))?;
        Ok(())
    }

    /// `{ title, name, basename, sizeLabel, quantization, architecture, vocabSize, contextLength,
    /// parameters, fileBytes, path, weightBytes, kvBytesPerToken, stateBytes, skippedBlocks, device }` as JSON; `title` is
    /// named from `file_name` (the model's URL) when given; `device` is where it runs, as a person
    /// reads it.
    pub fn info(&self, file_name: Option<String>) -> Result<String, JsValue> {
        let inner = self.inner.try_borrow().map_err(|_| busy())?;
        let mut info = shapes::info(inner.engine.info(), file_name.as_deref());
        info["device"] = inner.engine.model().device().describe().into();
        Ok(info.to_string())
    }

    /// The token ids of `text` (control tokens written in it are parsed as special tokens).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, JsValue> {
        let inner = self.inner.try_borrow().map_err(|_| busy())?;
        inner.engine.tokenizer().encode(text).map_err(|e| engine_error(e.into()))
    }

    /// Starts a generation from the options of `lm.generate` (JSON). Fails with `busy` while
    /// another generation has not finished (or been stopped).
    pub fn start(&self, options_json: &str) -> Result<(), JsValue> {
        let mut inner = self.inner.try_borrow_mut().map_err(|_| busy())?;
        if inner.generation.as_ref().is_some_and(|g| !g.is_finished()) {
            return Err(busy());
        }
        let request = GenerateRequest::from_json(options_json, inner.engine.info().vocab_size).map_err(option_error)?;
        let generation = inner.engine.start(request).map_err(engine_error)?;
        inner.generation = Some(generation);
        Ok(())
    }

    /// Runs the next step of the current generation. Resolves to the step as JSON, or `null`
    /// once the generation has finished. With `on_prefill`, a first step calls
    /// `on_prefill(done, total, cached)` (prompt tokens) as its prompt goes: on WebGPU after each
    /// chunk it runs the prompt in, on the CPU engine after each block of its one pass.
    #[wasm_bindgen(js_name = nextStep)]
    // The borrow is held across the step's awaits on purpose: it is the lock that makes any other
    // call during a step fail with `busy` (try_borrow*), never a panic.
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn next_step(&self, on_prefill: Option<Function>) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let mut inner = inner.try_borrow_mut().map_err(|_| busy())?;
            let Inner { engine, generation, last_logits } = &mut *inner;
            let generation = generation.as_mut().ok_or_else(no_generation)?;
            let step = match on_prefill {
                Some(callback) => {
                    let mut report = |p: PrefillProgress| {
                        let count = |n: usize| JsValue::from(n as f64);
                        let _ = callback.call3(&JsValue::NULL, &count(p.done), &count(p.total), &count(p.cached));
                    };
                    engine.step_reporting(generation, &mut report).await
                }
                None => engine.step(generation).await,
            };
            match step.map_err(engine_error)? {
                Some(mut step) => {
                    *last_logits = step.logits.take();
                    Ok(shapes::step(&step).to_string().into())
                }
                None => Ok(JsValue::NULL),
            }
        })
    }

    /// The logit lens of one step (`lm.logitLens`'s options as JSON): resolves to the report as
    /// JSON. Uses the KV cache: fails with `busy` while a generation has not finished.
    #[wasm_bindgen(js_name = logitLens)]
    #[allow(clippy::await_holding_refcell_ref)] // the borrow is the lock, as in next_step
    pub fn logit_lens(&self, options_json: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let mut inner = inner.try_borrow_mut().map_err(|_| busy())?;
            if inner.generation.as_ref().is_some_and(|g| !g.is_finished()) {
                return Err(busy());
            }
            let engine = &mut inner.engine;
            let request = LensRequest::from_json(&options_json, engine.info().vocab_size).map_err(option_error)?;
            let report = engine.logit_lens(&request).await.map_err(engine_error)?;
            Ok(shapes::lens(&report).to_string().into())
        })
    }

    /// A text rated token by token (`lm.score`'s options as JSON, the text as `prompt` or the chat
    /// as `messages`): resolves to the report as JSON. Replaces the KV cache's contents with the
    /// text: fails with `busy` while a generation has not finished.
    #[wasm_bindgen(js_name = score)]
    #[allow(clippy::await_holding_refcell_ref)] // the borrow is the lock, as in next_step
    pub fn score(&self, options_json: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let mut inner = inner.try_borrow_mut().map_err(|_| busy())?;
            if inner.generation.as_ref().is_some_and(|g| !g.is_finished()) {
                return Err(busy());
            }
            let request =
                ScoreRequest::from_json(&options_json, inner.engine.info().vocab_size).map_err(option_error)?;
            let report = inner.engine.score(&request).await.map_err(engine_error)?;
            Ok(shapes::score(&report).to_string().into())
        })
    }

    /// One layer's attention over a text (`lm.attention`'s options as JSON): resolves to the
    /// report as JSON. Replaces the KV cache's contents with the text: fails with `busy` while a
    /// generation has not finished.
    #[wasm_bindgen(js_name = attention)]
    #[allow(clippy::await_holding_refcell_ref)] // the borrow is the lock, as in next_step
    pub fn attention(&self, options_json: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let mut inner = inner.try_borrow_mut().map_err(|_| busy())?;
            if inner.generation.as_ref().is_some_and(|g| !g.is_finished()) {
                return Err(busy());
            }
            let request = AttentionRequest::from_json(&options_json).map_err(option_error)?;
            let report = inner.engine.attention(&request).await.map_err(engine_error)?;
            Ok(shapes::attention(&report).to_string().into())
        })
    }

    /// A beam search (`lm.beamSearch`'s options as JSON): resolves to its hypotheses and its
    /// tree as JSON. Its caches are its own; the engine's is left as it was.
    #[wasm_bindgen(js_name = beamSearch)]
    #[allow(clippy::await_holding_refcell_ref)] // the borrow is the lock, as in next_step
    pub fn beam_search(&self, options_json: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let mut inner = inner.try_borrow_mut().map_err(|_| busy())?;
            let request = BeamRequest::from_json(&options_json).map_err(option_error)?;
            let engine = &mut inner.engine;
            let output = engine.beam_search(&request).await.map_err(engine_error)?;
            let tokenizer = engine.tokenizer();
            Ok(shapes::beams(&output, |id| tokenizer.token_text(id)).to_string().into())
        })
    }

    /// The raw logits row of the last step (taken: a second call returns `undefined`), when
    /// the generation was started with `returnLogits`.
    #[wasm_bindgen(js_name = takeLogits)]
    pub fn take_logits(&self) -> Result<Option<js_sys::Float32Array>, JsValue> {
        let mut inner = self.inner.try_borrow_mut().map_err(|_| busy())?;
        Ok(inner.last_logits.take().map(|row| js_sys::Float32Array::from(row.as_slice())))
    }

    /// Ends the current generation now (an abort); returns the text it was holding back.
    pub fn stop(&self) -> Result<String, JsValue> {
        let mut inner = self.inner.try_borrow_mut().map_err(|_| busy())?;
        Ok(inner.generation.as_mut().map(|g| g.stop()).unwrap_or_default())
    }

    /// What the engine holds on the GPU now, as JSON: `{ liveBuffers, liveBytes, kvCacheBytes }`
    /// (`liveBuffers` and `liveBytes`: every GPU buffer the engine holds, the weights included);
    /// the worker adds the wasm memory's size.
    pub fn diagnostics(&self) -> Result<String, JsValue> {
        let inner = self.inner.try_borrow().map_err(|_| busy())?;
        #[cfg(feature = "gpu")]
        let (buffers, bytes) = inner.engine.model().device().gpu().map_or((0, 0), |gpu| {
            let counters = gpu.counters();
            (counters.live_buffers, counters.live_bytes)
        });
        #[cfg(not(feature = "gpu"))]
        let (buffers, bytes) = (0, 0);
        Ok(serde_json::json!({
            "liveBuffers": buffers,
            "liveBytes": bytes,
            "kvCacheBytes": inner.engine.cache().device_bytes(),
        })
        .to_string())
    }

    /// The current generation's outcome as JSON (`finishReason` `"abort"` if it was stopped);
    /// the worker adds `timing.loadMs`.
    pub fn result(&self) -> Result<String, JsValue> {
        let inner = self.inner.try_borrow().map_err(|_| busy())?;
        let generation = inner.generation.as_ref().ok_or_else(no_generation)?;
        Ok(shapes::result(&generation.result()).to_string())
    }
}

fn busy() -> JsValue {
    js_error("busy", "a generation is running: wait for it to finish or abort it first")
}

fn no_generation() -> JsValue {
    js_error("bad-options", "no generation has been started")
}
