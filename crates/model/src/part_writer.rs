//! [`PartWriter`]: a weight's bytes written into its GPU buffers as they arrive, a piece at a
//! time, without the weight ever being whole in memory (the browser's WebGPU load of a download:
//! `TensorStream` gives a tensor stored as the GPU reads it in pieces, straight from the chunks).
//!
//! A weight lies in one buffer, or a vocabulary-sized one in several parts of consecutive rows.
//! A queue write takes an offset and a length that are multiples of 4 bytes, while pieces end
//! wherever a chunk of the download ended and parts where a row did (945 bytes for a Q6_K row of
//! 1,152 values): so each piece is written at once up to its last whole 4 bytes within the part,
//! and the 1 to 3 bytes after wait for the next piece (a part's last write may end anywhere: the
//! GPU write pads it, within the buffer's size rounded up to 4).

/// Where the bytes of one weight go, as they arrive in order.
#[derive(Debug)]
pub(crate) struct PartWriter {
    /// Each part's length in bytes.
    parts: Vec<u64>,
    /// The part being written.
    part: usize,
    /// Bytes of that part written.
    written: u64,
    /// Bytes received after `written`, fewer than 4, waiting to make a write of 4.
    carry: Vec<u8>,
}

impl PartWriter {
    /// A writer of a weight in parts of `parts` bytes each, in order.
    pub(crate) fn new(parts: impl IntoIterator<Item = u64>) -> Self {
        Self { parts: parts.into_iter().collect(), part: 0, written: 0, carry: Vec::with_capacity(4) }
    }

    /// Takes the weight's next `bytes` and calls `write(part, offset, bytes)` for each write they
    /// complete: offsets within a part are multiples of 4, and so are lengths but a part's last.
    pub(crate) fn write(&mut self, mut bytes: &[u8], mut write: impl FnMut(usize, u64, &[u8])) {
        while !bytes.is_empty() {
            let left = self.parts[self.part] - self.written - self.carry.len() as u64;
            let (mut now, rest) = bytes.split_at((left as usize).min(bytes.len()));
            bytes = rest;
            let ends_part = now.len() as u64 == left;
            if !self.carry.is_empty() {
                let fill = (4 - self.carry.len()).min(now.len());
                self.carry.extend_from_slice(&now[..fill]);
                now = &now[fill..];
                if self.carry.len() == 4 || (ends_part && now.is_empty()) {
                    write(self.part, self.written, &self.carry);
                    self.written += self.carry.len() as u64;
                    self.carry.clear();
                }
            }
            let whole = if ends_part { now.len() } else { now.len() & !3 };
            if whole > 0 {
                write(self.part, self.written, &now[..whole]);
                self.written += whole as u64;
            }
            self.carry.extend_from_slice(&now[whole..]);
            if ends_part {
                self.part += 1;
                self.written = 0;
            }
        }
    }

    /// Whether every part has been written whole.
    pub(crate) fn done(&self) -> bool {
        self.part == self.parts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A weight of `parts` bytes each, its bytes fed in pieces of the lengths `pieces` cycles
    /// through: every write where a queue write may be, and the parts' bytes what was fed.
    fn written(parts: &[u64], pieces: &[usize]) -> usize {
        let total = parts.iter().sum::<u64>() as usize;
        let weight: Vec<u8> = (0..total).map(|i| (i * 7 + 3) as u8).collect();
        let mut buffers: Vec<Vec<u8>> = parts.iter().map(|&len| vec![0; (len as usize).next_multiple_of(4)]).collect();
        let mut writes = 0;
        let mut writer = PartWriter::new(parts.iter().copied());
        let (mut at, mut i) = (0, 0);
        while at < total {
            let piece = &weight[at..(at + pieces[i % pieces.len()]).min(total)];
            writer.write(piece, |part, offset, bytes| {
                assert_eq!(offset % 4, 0, "part {part}: an offset a queue write takes");
                let end = offset as usize + bytes.len();
                assert!(
                    bytes.len() % 4 == 0 || end == parts[part] as usize,
                    "part {part}: a length a queue write takes"
                );
                // The GPU write pads the length to 4 with zeros.
                let padded = bytes.len().next_multiple_of(4);
                buffers[part][offset as usize..offset as usize + padded].fill(0);
                buffers[part][offset as usize..end].copy_from_slice(bytes);
                writes += 1;
            });
            at += piece.len();
            i += 1;
        }
        assert!(writer.done());
        let mut start = 0;
        for (part, &len) in parts.iter().enumerate() {
            assert_eq!(&buffers[part][..len as usize], &weight[start..start + len as usize], "part {part}");
            start += len as usize;
        }
        writes
    }

    #[test]
    fn pieces_of_any_length_fill_parts_of_any_length_in_writes_a_queue_takes() {
        // Q6_K rows of 1,152 values are 945 bytes: parts of 3 and 2 rows, and one part alone.
        for parts in [vec![945 * 3, 945 * 2], vec![945 * 5], vec![4096, 4096], vec![5, 1, 3]] {
            for pieces in [vec![1], vec![3], vec![4], vec![7, 1, 2], vec![945], vec![4096], vec![100_000]] {
                written(&parts, &pieces);
            }
        }
        // Whole, a part is one write; in pieces of 4 bytes or more, a piece is at most two (its
        // start completing the carry, then the rest).
        assert_eq!(written(&[945 * 3, 945 * 2], &[945 * 5]), 2);
        assert!(written(&[945 * 5], &[1001]) <= 2 * (945 * 5usize).div_ceil(1001));
    }
}
