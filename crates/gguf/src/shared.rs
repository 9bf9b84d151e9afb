//! A whole file's bytes held by reference count, so that a model can read its tensors where
//! they lie instead of copying them out: a memory map natively (the CLI), the downloaded bytes
//! in wasm memory in the browser. The file stays alive as long as a tensor read from it does.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// A whole file's bytes, shared.
#[derive(Clone)]
pub struct SharedBytes(Arc<dyn AsRef<[u8]> + Send + Sync>);

impl SharedBytes {
    /// Shares `bytes` (a `Vec<u8>`, a memory map: anything that is bytes).
    pub fn new(bytes: impl AsRef<[u8]> + Send + Sync + 'static) -> Self {
        Self(Arc::new(bytes))
    }

    /// The bytes in `range`, holding the whole file alive. Panics outside the file, as slicing
    /// does.
    pub fn slice(&self, range: Range<usize>) -> SharedSlice {
        assert!(range.start <= range.end && range.end <= self.len(), "{range:?} is outside {} bytes", self.len());
        SharedSlice { bytes: self.clone(), range, copy: false }
    }
}

impl Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        (*self.0).as_ref()
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len())
    }
}

/// A range of a [`SharedBytes`]: one tensor's bytes, read where they lie.
#[derive(Clone)]
pub struct SharedSlice {
    bytes: SharedBytes,
    range: Range<usize>,
    copy: bool,
}

impl SharedSlice {
    /// A copy of some bytes, held the same way as a slice of a file.
    pub fn copy_of(bytes: &[u8]) -> Self {
        Self { copy: true, ..SharedBytes::new(bytes.to_vec()).slice(0..bytes.len()) }
    }

    /// Whether these bytes are a copy (memory of their own), not a range of a file.
    pub fn is_copy(&self) -> bool {
        self.copy
    }
}

impl Deref for SharedSlice {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[self.range.clone()]
    }
}

impl fmt::Debug for SharedSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedSlice({:?} of {} bytes)", self.range, self.bytes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_reads_its_range_and_keeps_the_file_alive() {
        let file = SharedBytes::new((0u8..100).collect::<Vec<_>>());
        let slice = file.slice(10..14);
        assert!(!slice.is_copy());
        drop(file);
        assert_eq!(&*slice, &[10, 11, 12, 13]);
        let copy = SharedSlice::copy_of(&slice);
        assert!(copy.is_copy());
        assert_eq!(&*copy, &*slice);
    }

    #[test]
    #[should_panic(expected = "outside 4 bytes")]
    fn a_range_past_the_end_panics() {
        SharedBytes::new(vec![0u8; 4]).slice(2..5);
    }
}
