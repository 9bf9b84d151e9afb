//! [`ModelFile`]: a model file received into WebAssembly memory as its bytes arrive, so that the
//! page never holds a whole copy of it in JS.
//!
//! The worker appends each chunk of a download, a stored copy or a given `File` as it is read
//! (`www/download.js`): the chunk is copied once, from the network's buffer into this file's
//! place in wasm memory, and hashed there (SHA-256, for `info.sha256` and the stored copy's
//! check). The load is planned from the bytes received so far ([`plan_load`](crate::bindings)),
//! and the whole file's room is reserved once the plan accepts it, so a download or a given file
//! that cannot fit is refused before the memory is taken (a stored copy, which loaded before, is
//! reserved at its recorded length and planned whole). The CPU engine then reads its matrices where they lie
//! ([`SharedBytes`]): the file's bytes in wasm memory are the model's weights. The Cache API copy
//! is written from here too, a slice at a time ([`ModelFile::read`]).
//!
//! Measured (`tests/browser/bench.mjs`, the CPU engine in Chromium, ARCHITECTURE.md "Memory"):
//! the renderer's peak during the load of a Gemma-3-1B-shaped file (768.7 MiB) went from 2,568
//! MiB (3.34x: the chunks, their concatenation, the digest's copy and the copy into wasm) to
//! 1,208 MiB (1.57x), with the same load time.

use std::fmt::Write as _;

use nucleus_engine::SharedBytes;
use sha2::{Digest, Sha256};
use wasm_bindgen::prelude::*;

use crate::bindings::js_error;

/// The bytes received, writable until the engine takes them.
enum Contents {
    Receiving(Vec<u8>),
    /// Shared with an engine (the CPU engine reads its matrices here); no longer written.
    Shared(SharedBytes),
}

/// A model file in wasm memory, filled a chunk at a time and hashed as it fills.
#[wasm_bindgen]
pub struct ModelFile {
    contents: Contents,
    hasher: Sha256,
}

#[wasm_bindgen]
impl ModelFile {
    /// An empty file.
    #[wasm_bindgen(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> ModelFile {
        ModelFile { contents: Contents::Receiving(Vec::new()), hasher: Sha256::new() }
    }

    /// Takes room for the whole file (`length` bytes) at once, so that it never grows by
    /// copying: called when its plan has accepted it. `out-of-memory` when this browser's
    /// WebAssembly memory cannot hold it.
    pub fn reserve(&mut self, length: f64) -> Result<(), JsValue> {
        let bytes = self.receiving()?;
        let more = (length as usize).saturating_sub(bytes.len());
        bytes.try_reserve_exact(more).map_err(|_| no_room(length))
    }

    /// Appends `chunk` (the next bytes of the file) and hashes it.
    pub fn append(&mut self, chunk: &[u8]) -> Result<(), JsValue> {
        let bytes = self.receiving()?;
        let wanted = bytes.len() as f64 + chunk.len() as f64;
        bytes.try_reserve(chunk.len()).map_err(|_| no_room(wanted))?;
        bytes.extend_from_slice(chunk);
        self.hasher.update(chunk);
        Ok(())
    }

    /// Forgets what was received (a server that sent the file again from its first byte); the
    /// room taken stays, for the same file.
    pub fn clear(&mut self) -> Result<(), JsValue> {
        self.receiving()?.clear();
        self.hasher = Sha256::new();
        Ok(())
    }

    /// The bytes received so far.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> f64 {
        self.bytes().len() as f64
    }

    /// A copy of `length` bytes from `offset` (fewer at the end): the first bytes a check reads,
    /// a slice of the Cache API copy.
    pub fn read(&self, offset: f64, length: f64) -> Vec<u8> {
        let bytes = self.bytes();
        let start = (offset as usize).min(bytes.len());
        let end = start.saturating_add(length as usize).min(bytes.len());
        bytes[start..end].to_vec()
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
    /// The bytes received so far.
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.contents {
            Contents::Receiving(bytes) => bytes,
            Contents::Shared(bytes) => bytes,
        }
    }

    /// The file's bytes as an engine holds them: the same memory, no copy. After this the file
    /// is read-only.
    pub(crate) fn shared(&mut self) -> SharedBytes {
        if let Contents::Receiving(bytes) = &mut self.contents {
            self.contents = Contents::Shared(SharedBytes::new(std::mem::take(bytes)));
        }
        match &self.contents {
            Contents::Shared(bytes) => bytes.clone(),
            Contents::Receiving(_) => unreachable!("shared just above"),
        }
    }

    fn receiving(&mut self) -> Result<&mut Vec<u8>, JsValue> {
        match &mut self.contents {
            Contents::Receiving(bytes) => Ok(bytes),
            Contents::Shared(_) => Err(js_error("internal", "a model file is written after an engine took it")),
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
