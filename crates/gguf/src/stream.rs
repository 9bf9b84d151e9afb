//! [`TensorStream`]: a file's tensors, whole or in pieces, from its bytes read once in order, a
//! chunk at a time, without the file ever being whole in memory.
//!
//! The browser's WebGPU load reads a download this way. A tensor the GPU takes as the file stores
//! it is given in pieces, straight from the chunks, each written to its buffer as it arrives
//! ([`Wanted::InPieces`]); one the load must see whole (to convert it, or to keep it on the host)
//! is given whole ([`Wanted::Whole`]): from the chunk when it lies inside one, else from one
//! staging buffer taken once at the largest such tensor's size.

use std::ops::Range;

use crate::{GgufError, GgufHeader, TensorInfo};

/// How a load takes one of a file's tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// Not read.
    No,
    /// Given whole, in one [`Piece`].
    Whole,
    /// Given in pieces as its bytes arrive, nothing staged.
    InPieces,
}

/// Bytes of a wanted tensor that [`TensorStream::read`] gives: the tensor whole, or one piece of
/// it; a tensor's pieces come in order, the next starting where the last ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The tensor's index in the header's table.
    pub index: usize,
    /// Where `bytes` begin in the tensor.
    pub at: u64,
    pub bytes: &'a [u8],
    /// Whether `bytes` end the tensor.
    pub last: bool,
}

/// The tensors of a file that a load wants, given as the file's bytes are read in order.
#[derive(Debug)]
pub struct TensorStream {
    /// The wanted tensors' places in the file, their indices in the header's table and whether
    /// they are given whole, in the order they lie.
    order: Vec<(Range<u64>, usize, bool)>,
    /// The first of `order` not yet given.
    next: usize,
    /// Bytes of the file read so far (the next byte expected).
    position: u64,
    /// The bytes of `order[next]` received so far, when it is given whole and began in an
    /// earlier chunk.
    staging: Vec<u8>,
}

impl TensorStream {
    /// A stream of the tensors of `header` for which `wanted` says so. Tensors that overlap
    /// another wanted one are `Corrupt` (a file read once cannot give both).
    pub fn new(header: &GgufHeader, wanted: impl Fn(&TensorInfo) -> Wanted) -> Result<Self, GgufError> {
        let mut order: Vec<(Range<u64>, usize, bool)> = header
            .tensors
            .iter()
            .enumerate()
            .filter_map(|(index, tensor)| {
                let whole = match wanted(tensor) {
                    Wanted::No => return None,
                    how => how == Wanted::Whole,
                };
                let range = header.tensor_range(tensor);
                Some((range.start as u64..range.end as u64, index, whole))
            })
            .collect();
        order.sort_by_key(|(range, ..)| range.start);
        if let Some(pair) = order.windows(2).find(|pair| pair[1].0.start < pair[0].0.end) {
            let name = |i: usize| &header.tensors[pair[i].1].name;
            return Err(GgufError::Corrupt(format!("tensors '{}' and '{}' overlap", name(0), name(1))));
        }
        Ok(Self { order, next: 0, position: 0, staging: Vec::new() })
    }

    /// Bytes of the file read so far.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Whether every wanted tensor has been given.
    pub fn done(&self) -> bool {
        self.next == self.order.len()
    }

    /// The most bytes the stream holds at once: the largest tensor given whole (its staging
    /// buffer).
    pub fn staging_bytes(&self) -> u64 {
        self.order.iter().filter(|(.., whole)| *whole).map(|(range, ..)| range.end - range.start).max().unwrap_or(0)
    }

    /// Reads `chunk`, the file's bytes from `offset`, and gives `take` each wanted tensor it
    /// completes, or each piece of one given in pieces, in file order. Bytes before
    /// [`Self::position`] were read already and are skipped (a download that started again from
    /// its first byte); a chunk that begins after it is an error (bytes would be missing). An
    /// error from `take` stops the read and is returned.
    pub fn read<E: From<GgufError>>(
        &mut self,
        offset: u64,
        chunk: &[u8],
        mut take: impl FnMut(Piece<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let end = offset + chunk.len() as u64;
        if offset > self.position {
            return Err(GgufError::Corrupt(format!(
                "bytes from {offset} came before those from {} (the file is read in order)",
                self.position
            ))
            .into());
        }
        while self.position < end {
            let Some((range, index, whole)) = self.order.get(self.next).cloned() else {
                self.position = end;
                break;
            };
            let here = |at: u64| (at - offset) as usize;
            if range.start >= end {
                self.position = end;
                break;
            }
            if self.position < range.start {
                self.position = range.start;
            }
            let until = range.end.min(end);
            let last = until == range.end;
            if !whole || (self.staging.is_empty() && self.position == range.start && last) {
                let bytes = &chunk[here(self.position)..here(until)];
                take(Piece { index, at: self.position - range.start, bytes, last })?;
            } else {
                if self.staging.capacity() == 0 {
                    self.staging.reserve_exact(self.staging_bytes() as usize);
                }
                self.staging.extend_from_slice(&chunk[here(self.position)..here(until)]);
                if last {
                    let result = take(Piece { index, at: 0, bytes: &self.staging, last });
                    self.staging.clear();
                    result?;
                }
            }
            self.position = until;
            if last {
                self.next += 1;
            }
        }
        Ok(())
    }
}
