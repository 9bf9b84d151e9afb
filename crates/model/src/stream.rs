//! [`ModelStream`]: a model loaded on the fused path as its file's bytes arrive, in order, a chunk
//! at a time, so that the file is never whole in memory: a weight the GPU reads as the file
//! stores it is written to its buffers piece by piece as the chunks arrive (`part_writer.rs`),
//! and only a tensor the load converts (or keeps on the host) is held whole until its last byte
//! is in (`TensorStream`'s staging, the largest such tensor's size). The browser's WebGPU load
//! reads a download, a stored copy or a given file this way; the CPU engine reads its weights
//! where they lie in the file, so it keeps the whole file instead.

use nucleus_gguf::{GgufError, GgufHeader, TensorStream};

use crate::fused::FusedUpload;
use crate::{LoadProgress, Model, ModelConfig, ModelDevice, ModelError, Route, weights};

/// A fused-path load fed its file's bytes in order ([`Model::stream`]).
pub struct ModelStream {
    header: GgufHeader,
    device: ModelDevice,
    upload: FusedUpload,
    tensors: TensorStream,
    progress: LoadProgress,
}

impl Model {
    /// Starts loading, on the fused path of the wgpu `device`, the model whose file's header is
    /// `header` (`config`: what it says): every tensor's type and shape is checked now, before
    /// anything is uploaded; [`ModelStream::read`] then takes the file's bytes.
    pub fn stream(header: GgufHeader, config: &ModelConfig, device: &ModelDevice) -> Result<ModelStream, ModelError> {
        let gpu = device.gpu().ok_or_else(|| {
            ModelError::Device(format!("the fused path runs on wgpu devices, not {}", device.describe()))
        })?;
        let upload = FusedUpload::new(&header, config, gpu)?;
        let tensors = TensorStream::new(&header, |info| upload.wants(info))?;
        let progress = LoadProgress::of(weights::tensors(&header, config)?.into_iter().map(|(_, _, info)| info));
        Ok(ModelStream { device: device.clone(), upload, tensors, progress, header })
    }
}

impl ModelStream {
    /// The file's header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// Reads `chunk`, the file's bytes from `offset`, uploading each tensor it completes. Bytes
    /// read before are skipped (a download that starts again from its first byte); bytes after
    /// a gap are `Corrupt`.
    pub fn read(&mut self, offset: u64, chunk: &[u8]) -> Result<(), ModelError> {
        let Self { header, upload, tensors, progress, .. } = self;
        tensors.read(offset, chunk, |piece| {
            let info = &header.tensors[piece.index];
            upload.take(info, piece)?;
            if piece.last && upload.is_weight(info) {
                progress.add(info);
            }
            Ok::<_, ModelError>(())
        })
    }

    /// The tensors uploaded so far, and their bytes in the file.
    pub fn progress(&self) -> LoadProgress {
        self.progress
    }

    /// The most bytes the load holds of the file at once: the largest tensor it takes whole.
    pub fn staging_bytes(&self) -> u64 {
        self.tensors.staging_bytes()
    }

    /// The model, once the whole file has been read, running `config` (the file's, with the
    /// context the load asks for), and the file's header back. A file that ended before its last
    /// tensor is `Truncated`.
    pub fn finish(self, config: ModelConfig) -> Result<(Model, GgufHeader), ModelError> {
        let Self { header, device, upload, tensors, .. } = self;
        if !tensors.done() {
            return Err(GgufError::Truncated {
                what: "the tensors' data".into(),
                needed: header.file_len,
                len: tensors.position(),
            }
            .into());
        }
        // Its staging (the largest tensor's size) is free before the model is assembled, which
        // then takes that memory again instead of more.
        drop(tensors);
        let tied_output = weights::tied_output(&header);
        let fused = upload.finish(&header, &config)?;
        Ok((Model { config, device, tied_output, route: Route::Fused(fused) }, header))
    }
}
