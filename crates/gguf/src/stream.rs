//! [`TensorStream`]: a file's tensors, each whole, from its bytes read once in order, a chunk at a
//! time, without the file ever being whole in memory.
//!
//! The browser's WebGPU load reads a download this way: each tensor goes to its GPU buffer as
//! soon as its last byte arrives, and only the tensor being received is held (in one staging
//! buffer, taken once at the largest tensor's size). A tensor that lies whole inside one chunk is
//! given straight from the chunk, not copied.

use std::ops::Range;

use crate::{GgufError, GgufHeader, TensorInfo};

/// The tensors of a file that a load wants, given whole as the file's bytes are read in order.
#[derive(Debug)]
pub struct TensorStream {
    /// The wanted tensors' places in the file and their indices in the header's table, in the
    /// order they lie.
    order: Vec<(Range<u64>, usize)>,
    /// The first of `order` not yet given.
    next: usize,
    /// Bytes of the file read so far (the next byte expected).
    position: u64,
    /// The bytes of `order[next]` received so far, when it began in an earlier chunk.
    staging: Vec<u8>,
}

impl TensorStream {
    /// A stream of the tensors of `header` for which `wanted` says so. Tensors that overlap
    /// another wanted one are `Corrupt` (a file read once cannot give both).
    pub fn new(header: &GgufHeader, wanted: impl Fn(&TensorInfo) -> bool) -> Result<Self, GgufError> {
        let mut order: Vec<(Range<u64>, usize)> = header
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, tensor)| wanted(tensor))
            .map(|(index, tensor)| {
                let range = header.tensor_range(tensor);
                (range.start as u64..range.end as u64, index)
            })
            .collect();
        order.sort_by_key(|(range, _)| range.start);
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

    /// The most bytes the stream holds at once: the largest wanted tensor's (its staging buffer).
    pub fn staging_bytes(&self) -> u64 {
        self.order.iter().map(|(range, _)| range.end - range.start).max().unwrap_or(0)
    }

    /// Reads `chunk`, the file's bytes from `offset`, and gives `take(index, bytes)` each wanted
    /// tensor it completes (`index` in the header's table), in file order. Bytes before
    /// [`Self::position`] were read already and are skipped (a download that started again from
    /// its first byte); a chunk that begins after it is an error (bytes would be missing). An
    /// error from `take` stops the read and is returned.
    pub fn read<E: From<GgufError>>(
        &mut self,
        offset: u64,
        chunk: &[u8],
        mut take: impl FnMut(usize, &[u8]) -> Result<(), E>,
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
            let Some((range, index)) = self.order.get(self.next).cloned() else {
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
            if self.staging.is_empty() && self.position == range.start && until == range.end {
                take(index, &chunk[here(range.start)..here(range.end)])?;
            } else {
                if self.staging.capacity() == 0 {
                    self.staging.reserve_exact(self.staging_bytes() as usize);
                }
                self.staging.extend_from_slice(&chunk[here(self.position)..here(until)]);
                if until == range.end {
                    let result = take(index, &self.staging);
                    self.staging.clear();
                    result?;
                }
            }
            self.position = until;
            if until == range.end {
                self.next += 1;
            }
        }
        Ok(())
    }
}
