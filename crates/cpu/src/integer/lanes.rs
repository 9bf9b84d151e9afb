//! A prompt's activation rows for AVX-512's integer products, sixteen to a register: each
//! [`IntegerRow`]'s digits interleaved so that one 64-byte load holds four consecutive values of
//! each of sixteen rows (the order `vpdpbusd` sums in an i32 lane), and their scales and sums
//! per lane. The weight row's four quants are then the one operand broadcast to every lane, and
//! one instruction makes 64 byte products where a decode step's product makes them for one row
//! (`avx512::lanes_products`; ARCHITECTURE.md, "A prompt's products in integers").

use nucleus_gguf::GgmlType;

use super::{Digits, IntegerRow};

/// Activation rows a register holds: one i32 lane each.
pub(crate) const LANES: usize = 16;

/// Up to [`LANES`] rows rounded as [`IntegerRow`]s (all of one width and scale block),
/// interleaved; the lanes past the last row are zeros.
pub(crate) struct Lanes {
    /// Per digit place, value `4·k + i` of lane `l` at `64·k + 4·l + i`.
    pub(super) digits: [Digits; 3],
    /// Per block of [`block`](Self::block) values, each lane's scale (`x ≈ X · scale`).
    pub(super) scales: Vec<f32>,
    /// Per [`GROUP`] values, each lane's `Σx`.
    pub(super) sums: Vec<f32>,
    /// Values per scale, as the rows were rounded.
    pub(super) block: usize,
    /// Values per row.
    pub(super) cols: usize,
    /// Rows in the lanes, from lane 0.
    pub(crate) rows: usize,
}

impl Lanes {
    /// Values per scale, as the rows were rounded.
    pub(crate) fn block(&self) -> usize {
        self.block
    }

    /// `rows` (1 to [`LANES`] of them, one width, rounded per the same block) interleaved.
    ///
    /// # Panics
    /// When `rows` is empty or longer than [`LANES`], or its rows differ in width or block.
    pub(crate) fn new(rows: &[IntegerRow]) -> Self {
        assert!((1..=LANES).contains(&rows.len()), "{} rows in {LANES} lanes", rows.len());
        let (block, cols) = (rows[0].block, rows[0].digits[0].len());
        assert!(rows.iter().all(|r| r.block == block && r.digits[0].len() == cols), "rows of one shape");
        let mut digits = [Digits::zeros(cols * LANES), Digits::zeros(cols * LANES), Digits::zeros(cols * LANES)];
        for (place, interleaved) in digits.iter_mut().enumerate() {
            for (lane, row) in rows.iter().enumerate() {
                for (k, four) in row.digits[place].chunks_exact(4).enumerate() {
                    interleaved[64 * k + 4 * lane..64 * k + 4 * lane + 4].copy_from_slice(four);
                }
            }
        }
        let per_lane = |values: &dyn Fn(&IntegerRow) -> &[f32], count: usize| {
            let mut out = vec![0f32; count * LANES];
            for (lane, row) in rows.iter().enumerate() {
                for (i, &value) in values(row).iter().enumerate() {
                    out[i * LANES + lane] = value;
                }
            }
            out
        };
        Self {
            scales: per_lane(&|r| &r.scales, cols / block),
            sums: per_lane(&|r| &r.sums32, cols / GROUP),
            digits,
            block,
            cols,
            rows: rows.len(),
        }
    }
}

/// Values per scale of a weight row in the prompt's integer products (`w = scale·q + min` over
/// each).
pub(crate) const GROUP: usize = 32;

/// Whether `n` activation rows fill enough lanes for the products in lanes: at least one whole
/// register, and at least three lanes in four across all (each register's lanes past the rows are
/// products made for nothing). Measured against the tile, two threads (`matmul_speed`): 16 rows
/// of Q5_0 6,912 × 1,152 at 103 GMAC/s against 70, of Q4_1 1,536 × 576 at 80 against 65; 20
/// rows (two registers, 12 lanes of 32 wasted) at 71 against 75 and 56 against 69; 12 rows of
/// Q4_K 1,152 × 6,912 (one register, its unpacking for 12 rows alone) at 62 against 76.
pub(crate) fn fill_lanes(n: usize) -> bool {
    n >= LANES && 4 * n >= 3 * n.next_multiple_of(LANES)
}

/// Whether a prompt's products of `ggml_type` go through the integers in lanes: the one owner of
/// which formats do, those with a scale per 32 values and unsigned quants. Q8_0's signed quants
/// stay in the tile, and so do Q6_K's: their scale per 16 values doubles each row's joins and
/// scalings, and 32 rows of a 1,024 × 3,584 Q6_K matrix ran at 57 GMAC/s in lanes against the
/// tile's 93 (two threads, `matmul_speed`; ARCHITECTURE.md).
pub(crate) fn in_lanes(ggml_type: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ggml_type, Q4K | Q5K | Q4_0 | Q4_1 | Q5_0 | Q5_1)
}

/// Four weight rows unpacked for the prompt's products (a fifth of a tile's f32 bytes): each
/// row's quants a byte each, in the order of its values, and per [`GROUP`] values its scale and
/// minimum.
pub(crate) struct FourRows {
    /// Row `j`'s quants at `j·cols..`.
    pub(super) quants: Vec<u8>,
    /// Row `j`'s scales at `j·groups..`.
    pub(super) scales: Vec<f32>,
    /// Row `j`'s minimums at `j·groups..`.
    pub(super) mins: Vec<f32>,
    /// Values a row.
    pub(super) cols: usize,
}

impl FourRows {
    /// Room for four rows of `cols` values (whole [`GROUP`]s).
    pub(crate) fn new(cols: usize) -> Self {
        assert!(cols.is_multiple_of(GROUP), "rows of {cols} values are not whole groups of {GROUP}");
        Self { quants: vec![0; 4 * cols], scales: vec![0.0; 4 * cols / GROUP], mins: vec![0.0; 4 * cols / GROUP], cols }
    }

    /// Row `j`'s quants, scales and minimums, to be written.
    pub(super) fn row_mut(&mut self, j: usize) -> (&mut [u8], &mut [f32], &mut [f32]) {
        let (cols, groups) = (self.cols, self.cols / GROUP);
        (
            &mut self.quants[j * cols..(j + 1) * cols],
            &mut self.scales[j * groups..(j + 1) * groups],
            &mut self.mins[j * groups..(j + 1) * groups],
        )
    }
}
