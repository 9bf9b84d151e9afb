//! [`ModelFile`]: a model file received into WebAssembly memory as its bytes arrive, so that the
//! page never holds a whole copy of it in JS.
//!
//! The worker appends each chunk of a download, a stored copy or a given `File` as it is read
//! (`www/download.js`): the chunk is copied once, from the network's buffer into this file's
//! place in wasm memory, and hashed there (SHA-256, for `info.sha256` and the stored copy's
//! check). The load is planned from the bytes received so far ([`plan_load`](crate::bindings)),
//! and the whole file's room is reserved once the plan accepts it, so a download or a given file
//! that cannot fit is refused before the memory is taken (a stored copy, which loaded before, is
//! reserved at its recorded length and planned whole). The CPU engine then reads its matrices
//! where they lie ([`SharedBytes`]): the file's bytes in wasm memory are the model's weights. The
//! Cache API copy is written from here too, a slice at a time ([`ModelFile::read`]).
//!
//! One wasm32 allocation stops short of 2 GiB (`isize::MAX`), so a file is held in parts of at
//! most [`PART_BYTES`], split where a tensor begins ([`GgufHeader::parts`]), each reserved once
//! the header is in (a Gemma-3-4B-shaped file, 2.49 GB, is three).
//!
//! On WebGPU the file is not kept ([`ModelFile::streaming`]): once its length is known and its
//! header is in, each chunk goes on to an [`EngineStream`], which uploads every tensor as its last
//! byte arrives, holding only the tensor being received; the file keeps its header alone (what a
//! plan and the format check read). A file whose length is not known, or a model the fused path
//! does not run, is kept whole as on the CPU engine.
//!
//! Measured (`tests/browser/bench.mjs`, the CPU engine in Chromium, ARCHITECTURE.md "Memory"):
//! the renderer's peak during the load of a Gemma-3-1B-shaped file (768.7 MiB) went from 2,568
//! MiB (3.34x: the chunks, their concatenation, the digest's copy and the copy into wasm) to
//! 1,208 MiB (1.57x), with the same load time.

use std::fmt::Write as _;
use std::ops::Range;

#[cfg(feature = "gpu")]
use nucleus_engine::{Engine, EngineStream, LoadOptions};
use nucleus_engine::{GgufError, GgufHeader, SharedBytes};
use sha2::{Digest, Sha256};
use wasm_bindgen::prelude::*;

use crate::bindings::js_error;

/// The most bytes one part of a file holds (a tensor longer than that is a part of its own).
pub const PART_BYTES: u64 = 1 << 30;

/// A model file in wasm memory, filled a chunk at a time and hashed as it fills.
#[wasm_bindgen]
pub struct ModelFile {
    /// The parts, in order; one, growing, until the file's layout is known.
    parts: Vec<Vec<u8>>,
    /// Where each part lies in the file, once the length is known and the header is in.
    layout: Option<Vec<Range<u64>>>,
    /// The file's whole length, once known ([`ModelFile::reserve`]).
    expected: Option<u64>,
    /// Bytes the header needs before it can be laid out (a header parse that ran short).
    header_needs: u64,
    /// The part being filled.
    filling: usize,
    /// Shared with an engine (the CPU engine reads its matrices here): no longer written.
    shared: Option<SharedBytes>,
    hasher: Sha256,
    /// Whether the file's bytes go on to a WebGPU load as they arrive instead of being kept.
    #[cfg(feature = "gpu")]
    streaming: Streaming,
    /// Bytes received since the file (re)started: what [`ModelFile::length`] says while streaming.
    received: u64,
}

/// A file streamed to a WebGPU load ([`ModelFile::streaming`]).
#[cfg(feature = "gpu")]
enum Streaming {
    /// The file is kept whole.
    Off,
    /// Until the length is known and the header is in: the load's options.
    Waiting(LoadOptions),
    /// Each chunk goes on to the load; the file keeps its header alone.
    On(Box<EngineStream>),
}

#[wasm_bindgen]
impl ModelFile {
    /// An empty file.
    #[wasm_bindgen(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> ModelFile {
        ModelFile {
            parts: vec![Vec::new()],
            layout: None,
            expected: None,
            header_needs: 0,
            filling: 0,
            shared: None,
            hasher: Sha256::new(),
            #[cfg(feature = "gpu")]
            streaming: Streaming::Off,
            received: 0,
        }
    }

    /// An empty file whose bytes go on to a load on the worker's WebGPU device as they arrive
    /// (made by `prepareBackend` first), with the load's `context_length` and `memory_budget`:
    /// each tensor is uploaded when its last byte is in, and only the header is kept. The load
    /// starts once the file's length is known ([`ModelFile::reserve`]) and its header is in;
    /// [`load_engine`](crate::bindings) then finishes it.
    #[cfg(feature = "gpu")]
    pub fn streaming(context_length: Option<u32>, memory_budget: Option<f64>) -> ModelFile {
        let options = crate::bindings::load_options(context_length, memory_budget);
        ModelFile { streaming: Streaming::Waiting(options), ..ModelFile::new() }
    }

    /// Takes room for the whole file (`length` bytes) at once, so that it never grows by
    /// copying: called when its plan has accepted it (or, for a stored copy, at its recorded
    /// length). Held in parts, laid out once the header is in. `out-of-memory` when this
    /// browser's WebAssembly memory cannot hold it.
    pub fn reserve(&mut self, length: f64) -> Result<(), JsValue> {
        self.writable()?;
        self.expected = Some(length as u64);
        self.lay_out()
    }

    /// Appends `chunk` (the next bytes of the file) and hashes it.
    pub fn append(&mut self, mut chunk: &[u8]) -> Result<(), JsValue> {
        self.writable()?;
        self.hasher.update(chunk);
        #[cfg(feature = "gpu")]
        if let Streaming::On(stream) = &mut self.streaming {
            let offset = self.received;
            self.received += chunk.len() as u64;
            return stream.read(offset, chunk).map_err(crate::bindings::engine_error);
        }
        self.received += chunk.len() as u64;
        while !chunk.is_empty() {
            let room = match &self.layout {
                // The last part takes whatever comes past the length announced.
                Some(layout) if self.filling + 1 < layout.len() => {
                    let part = &layout[self.filling];
                    (part.end - part.start) as usize - self.parts[self.filling].len()
                }
                _ => chunk.len(),
            };
            if room == 0 {
                self.filling += 1;
                continue;
            }
            let (now, rest) = chunk.split_at(room.min(chunk.len()));
            let part = &mut self.parts[self.filling];
            let wanted = part.len() as f64 + now.len() as f64;
            part.try_reserve(now.len()).map_err(|_| no_room(wanted))?;
            part.extend_from_slice(now);
            chunk = rest;
        }
        if self.layout.is_none() && self.expected.is_some() && self.length() as u64 >= self.header_needs {
            self.lay_out()?;
        }
        Ok(())
    }

    /// Forgets what was received (a server that sent the file again from its first byte); the
    /// room taken stays, for the same file.
    pub fn clear(&mut self) -> Result<(), JsValue> {
        self.writable()?;
        self.received = 0;
        self.hasher = Sha256::new();
        // A stream skips the bytes it has read already; its header stays.
        if !self.is_streaming() {
            self.parts.iter_mut().for_each(Vec::clear);
            self.filling = 0;
        }
        Ok(())
    }

    /// The bytes received so far.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> f64 {
        match &self.shared {
            Some(shared) => shared.len() as f64,
            None => self.received as f64,
        }
    }

    /// A copy of `length` bytes from `offset` (fewer at the end): the first bytes a check reads,
    /// a slice of the Cache API copy. A streamed file holds its header alone: nothing past it.
    pub fn read(&self, offset: f64, length: f64) -> Vec<u8> {
        let total = self.part_bytes().iter().map(|part| part.len()).sum::<usize>();
        let start = (offset as usize).min(total);
        let end = start.saturating_add(length as usize).min(total);
        let mut out = Vec::with_capacity(end - start);
        let mut part_start = 0;
        for part in self.part_bytes() {
            let (lo, hi) = (start.max(part_start), end.min(part_start + part.len()));
            if lo < hi {
                out.extend_from_slice(&part[lo - part_start..hi - part_start]);
            }
            part_start += part.len();
        }
        out
    }

    /// The SHA-256 of the bytes received, as lowercase hex.
    pub fn sha256(&self) -> String {
        self.hasher.clone().finalize().iter().fold(String::with_capacity(64), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
    }
}

impl ModelFile {
    /// The first part's bytes: every byte received until the file is laid out, and always the
    /// header (what a plan reads).
    pub(crate) fn first_part(&self) -> &[u8] {
        match &self.shared {
            Some(shared) => shared.first_part(),
            None => &self.parts[0],
        }
    }

    /// The file's bytes as an engine holds them: the same memory, no copy. After this the file
    /// is read-only.
    pub(crate) fn shared(&mut self) -> SharedBytes {
        self.shared.get_or_insert_with(|| SharedBytes::from_parts(std::mem::take(&mut self.parts))).clone()
    }

    fn part_bytes(&self) -> Vec<&[u8]> {
        match &self.shared {
            Some(shared) => shared.parts().collect(),
            None => self.parts.iter().map(Vec::as_slice).collect(),
        }
    }

    /// Lays the file out in parts once its length is known and its header is in, taking each
    /// part's room; the bytes already received (the first few MiB) are moved into their parts.
    /// A header that does not parse leaves one part of the whole length (the plan says why).
    fn lay_out(&mut self) -> Result<(), JsValue> {
        let Some(expected) = self.expected.filter(|_| self.layout.is_none()) else { return Ok(()) };
        #[cfg(feature = "gpu")]
        match self.streaming {
            Streaming::Waiting(_) => return self.start_stream(expected),
            // Its bytes went on to the load: nothing to lay out.
            Streaming::On(_) => return Ok(()),
            Streaming::Off => {}
        }
        let layout = match GgufHeader::parse(&self.parts[0], expected) {
            Ok(header) => header.parts(PART_BYTES),
            Err(GgufError::Truncated { needed, .. }) => {
                self.header_needs = needed;
                return Ok(());
            }
            Err(_) => std::iter::once(0..expected).collect(),
        };
        let received = &self.parts[0];
        let mut parts = Vec::with_capacity(layout.len());
        for range in &layout {
            let mut part = Vec::new();
            part.try_reserve_exact((range.end - range.start) as usize).map_err(|_| no_room(expected as f64))?;
            let (lo, hi) = ((range.start as usize).min(received.len()), (range.end as usize).min(received.len()));
            part.extend_from_slice(&received[lo..hi]);
            parts.push(part);
        }
        self.filling = parts
            .iter()
            .zip(&layout)
            .position(|(part, range)| (part.len() as u64) < range.end - range.start)
            .unwrap_or(parts.len() - 1);
        self.parts = parts;
        self.layout = Some(layout);
        Ok(())
    }

    /// Starts the WebGPU load of a streamed file once its header is in (`expected` bytes long):
    /// the bytes received so far go on to it and the file keeps its header alone. A model the
    /// fused path does not run is kept whole instead (the load reads it so).
    #[cfg(feature = "gpu")]
    fn start_stream(&mut self, expected: u64) -> Result<(), JsValue> {
        let header = match GgufHeader::parse(&self.parts[0], expected) {
            Ok(header) => header,
            Err(GgufError::Truncated { needed, .. }) => {
                self.header_needs = needed;
                return Ok(());
            }
            // The plan says why (the load refuses the file as it did).
            Err(_) => return self.keep_whole(),
        };
        let Streaming::Waiting(options) = std::mem::replace(&mut self.streaming, Streaming::Off) else {
            unreachable!("a stream starts once")
        };
        let device = crate::bindings::ready_device("webgpu")?;
        let header_len = header.data_offset as usize;
        let stream = Engine::stream(header, &device, options, Some(crate::bindings::wasm_memory()));
        let Some(mut stream) = stream.map_err(crate::bindings::engine_error)? else {
            return self.keep_whole();
        };
        stream.read(0, &self.parts[0]).map_err(crate::bindings::engine_error)?;
        self.parts[0].truncate(header_len);
        self.parts[0].shrink_to_fit();
        self.streaming = Streaming::On(Box::new(stream));
        Ok(())
    }

    /// Gives up streaming: the file is kept whole, laid out as on the CPU engine.
    #[cfg(feature = "gpu")]
    fn keep_whole(&mut self) -> Result<(), JsValue> {
        self.streaming = Streaming::Off;
        self.lay_out()
    }

    /// Whether the file's bytes go on to a load instead of being kept.
    #[cfg(feature = "gpu")]
    fn is_streaming(&self) -> bool {
        matches!(self.streaming, Streaming::On(_))
    }

    #[cfg(not(feature = "gpu"))]
    fn is_streaming(&self) -> bool {
        false
    }

    /// The WebGPU load the file's bytes went on to, all of them read ([`ModelFile::streaming`]);
    /// `None` when the file was kept whole.
    #[cfg(feature = "gpu")]
    pub(crate) fn take_stream(&mut self) -> Option<EngineStream> {
        match std::mem::replace(&mut self.streaming, Streaming::Off) {
            Streaming::On(stream) => Some(*stream),
            other => {
                self.streaming = other;
                None
            }
        }
    }

    fn writable(&self) -> Result<(), JsValue> {
        match self.shared {
            None => Ok(()),
            Some(_) => Err(js_error("internal", "a model file is written after an engine took it")),
        }
    }
}

fn no_room(length: f64) -> JsValue {
    js_error(
        "out-of-memory",
        format!(
            "this browser's WebAssembly memory has no room for a model file of {:.1} MB (it holds 4 GiB at most, \
             and what the page holds already)",
            length / 1e6
        ),
    )
}
