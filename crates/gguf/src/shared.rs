//! A whole file's bytes held by reference count, so that a model can read its tensors where
//! they lie instead of copying them out: a memory map natively (the CLI), the downloaded bytes
//! in wasm memory in the browser. The file stays alive as long as a tensor read from it does.
//!
//! A file may be held in parts, each its own allocation: wasm32 allocations stop short of 2 GiB
//! (`isize::MAX`), so the browser keeps a bigger file (Gemma 3 4B's, 2.49 GB) in parts split
//! where a tensor begins ([`GgufHeader::parts`](crate::GgufHeader::parts)). A tensor lies in one
//! part; the header in the first.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

type Bytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A whole file's bytes, shared: one part, or several that follow each other.
#[derive(Clone)]
pub struct SharedBytes(Arc<[Part]>);

/// One allocation of a file: its bytes from `start`.
struct Part {
    start: usize,
    bytes: Bytes,
}

impl Part {
    fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    fn end(&self) -> usize {
        self.start + self.bytes().len()
    }
}

impl SharedBytes {
    /// Shares `bytes` (a `Vec<u8>`, a memory map: anything that is bytes), one part.
    pub fn new(bytes: impl AsRef<[u8]> + Send + Sync + 'static) -> Self {
        Self(Arc::new([Part { start: 0, bytes: Arc::new(bytes) }]))
    }

    /// Shares a file held in `parts`, in order: the first holds the file's header, and a tensor
    /// is read only from within one part.
    pub fn from_parts(parts: Vec<Vec<u8>>) -> Self {
        if parts.is_empty() {
            return Self::new(Vec::new());
        }
        let mut start = 0;
        let parts: Vec<Part> = parts
            .into_iter()
            .map(|bytes| {
                let part = Part { start, bytes: Arc::new(bytes) as Bytes };
                start = part.end();
                part
            })
            .collect();
        Self(parts.into())
    }

    /// The file's length.
    pub fn len(&self) -> usize {
        self.0.last().map_or(0, Part::end)
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each part's bytes, in order.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Part::bytes)
    }

    /// The first part's bytes: the whole file when it is one part, else at least its header.
    pub fn first_part(&self) -> &[u8] {
        self.0.first().map_or(&[], Part::bytes)
    }

    /// The bytes in `range`, which lie in one part. Panics outside the file or across parts, as
    /// slicing does outside a slice.
    pub fn get(&self, range: Range<usize>) -> &[u8] {
        let part = self.part_of(&range);
        &part.bytes()[range.start - part.start..range.end - part.start]
    }

    /// The bytes in `range`, holding the whole file alive. Panics as [`SharedBytes::get`].
    pub fn slice(&self, range: Range<usize>) -> SharedSlice {
        self.part_of(&range);
        SharedSlice { bytes: self.clone(), range, copy: false }
    }

    /// Whether `range` lies inside the file, in one part.
    pub fn holds_whole(&self, range: Range<usize>) -> bool {
        range.start <= range.end
            && range.end <= self.len()
            && self.0.iter().any(|part| part.start <= range.start && range.end <= part.end())
    }

    fn part_of(&self, range: &Range<usize>) -> &Part {
        assert!(range.start <= range.end && range.end <= self.len(), "{range:?} is outside {} bytes", self.len());
        let index = self.0.partition_point(|part| part.end() <= range.start).min(self.0.len() - 1);
        let part = &self.0[index];
        assert!(
            range.end <= part.end(),
            "{range:?} crosses from the part {}..{} into the next",
            part.start,
            part.end()
        );
        part
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes in {} parts)", self.len(), self.0.len())
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
        self.bytes.get(self.range.clone())
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

    #[test]
    fn a_file_in_parts_reads_each_range_from_its_part() {
        let file = SharedBytes::from_parts(vec![(0u8..10).collect(), (10u8..25).collect(), (25u8..30).collect()]);
        assert_eq!((file.len(), file.first_part().len()), (30, 10));
        assert_eq!(file.get(0..10), (0u8..10).collect::<Vec<_>>());
        assert_eq!(file.get(12..25), (12u8..25).collect::<Vec<_>>());
        assert_eq!(&*file.slice(25..30), &[25, 26, 27, 28, 29]);
        assert_eq!(file.get(10..10), &[] as &[u8]);
    }

    #[test]
    #[should_panic(expected = "crosses from the part 10..25 into the next")]
    fn a_range_across_parts_panics() {
        SharedBytes::from_parts(vec![vec![0u8; 10], vec![0u8; 15], vec![0u8; 5]]).slice(20..26);
    }
}
