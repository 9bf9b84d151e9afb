//! `y = x · Wᵀ` for f32 activation rows `x` and a weight matrix `W` in its GGUF blocks.

use nucleus_gguf::{GgmlType, dequantize_into};

use crate::dot::{self, Dot};
use crate::integer::{self, IntegerRow, RowDot};
use crate::threads::{for_each_task, threads};

/// Weights dequantized at a time: a multiple of every block size (32 and 256 values), 1 KB, so a
/// tile stays in L1 while the activation row reads it (a decode step's f32 products), and the
/// loop that converts a tile compiles to whole vectors (a prefill's rows go a tile at a time into
/// their buffer).
pub const TILE: usize = 256;

/// The fewest weight rows one task of a prefill's product computes: enough work per task to hide
/// the pool's hand-over (a few µs), few enough that two cores share even a 576-row projection.
const ROWS_PER_TASK: usize = 64;

/// Rows of each task of a prefill product of `rows` weight rows: the same number of tasks for
/// every thread, each at least [`ROWS_PER_TASK`] rows where there are that many (whole fours, the
/// kernel's groups). In tasks of 64 rows a 576-row projection was nine, and one thread waited out
/// the other's ninth: SmolLM2's 32-token prefill on two threads 393–421 -> 428–439 tok/s (72-row
/// tasks, three pairs; ARCHITECTURE.md, "How a product is split").
fn prefill_rows_per_task(rows: usize, threads: usize) -> usize {
    let tasks = (rows / (ROWS_PER_TASK * threads)).max(1) * threads;
    rows.div_ceil(tasks).next_multiple_of(4).max(4)
}

/// Tasks per thread of a decode step's products (one activation row; a few in integers split
/// alike, `integer_rows_most`): each thread streams long
/// runs of consecutive weight rows from memory. With 64-row tasks the two threads took turns
/// along the matrix, and a decode step ran hardly faster on two threads than on one (SmolLM2
/// natively: 8.7 → 8.2 ms a token, the output layer 1.83 → 1.70 ms); in two tasks a thread the
/// output layer takes 0.92 ms and the step about 5.5. One task a thread measured the same (two
/// leave the caller half of a late helper's rows to take); four, slower (ARCHITECTURE.md, "How a
/// product is split"). In the browser, four: its threads share the cores with the browser's own,
/// and with two tasks a thread the engine's worker spent a fifth of Gemma 3 270M's decode waiting
/// for a late helper's last quarter of a product; with four, 10 %, and Chromium decodes SmolLM2
/// at 77.6-87.6 tok/s against 62.8-81.3 and Gemma 3 270M at 39.5-45.9 against 31.2-38.5
/// (ARCHITECTURE.md, "A late helper's last task, in the browser").
pub(crate) const DECODE_TASKS_PER_THREAD: usize = if cfg!(target_family = "wasm") { 4 } else { 2 };

/// The most activation rows whose products of `ggml_type` go through the integer kernel (a decode
/// step's, `integer/`) one row at a time, where the CPU has one; past it the tile's f32
/// products, which dequantize each weight once for all the rows, are faster. Each row in integers
/// costs about a decode step's product; the tile's first row costs the whole dequantization, each
/// row more a little. The crossovers, measured (ARCHITECTURE.md, "A few rows in integers"):
/// natively (AVX-512) the integers are as fast or faster up to five rows for Q5_0, Q5_1 and the
/// K-quants, four for Q4_0 and Q4_1 (their tile is cheaper), three for Q8_0; in wasm (relaxed
/// SIMD in Chromium, plain SIMD in WebKit) up to three for Q4_K and Q5_K and two for the others
/// (Q5_0's, Q5_1's and Q6_K's since their tiles are unpacked in registers, `crate::dequant`).
/// None for the formats without an integer kernel.
fn integer_rows_most(ggml_type: GgmlType) -> usize {
    use GgmlType::*;
    if cfg!(target_family = "wasm") {
        return match ggml_type {
            Q4K | Q5K => 3,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q6K => 2,
            _ => 0,
        };
    }
    match ggml_type {
        Q5_0 | Q5_1 | Q4K | Q5K | Q6K => 5,
        Q4_0 | Q4_1 => 4,
        Q8_0 => 3,
        _ => 0,
    }
}

/// Weight rows the integer kernel computes for one activation row before the next row reads
/// them again, from the cache, where several rows go through it (`integer_rows_most`): 64
/// measured as fast as the whole task per row on most shapes, and faster on the 262,144-row
/// output layers, whose tasks do not fit in a cache (Gemma 3 1B's Q8_0 layer for three rows 24.5
/// ms against 30.2, natively on two threads).
const INTEGER_ROWS_RUN: usize = 64;

/// Rows of each task of a decode product of `rows` weight rows in all: a share of
/// [`DECODE_TASKS_PER_THREAD`] per thread, in whole 64-byte lines of output (no two threads
/// write one line), at least one line (a product of no rows is still split in tasks of some).
fn decode_rows_per_task(rows: usize) -> usize {
    rows.div_ceil(threads() * DECODE_TASKS_PER_THREAD).next_multiple_of(16).max(16)
}

/// A weight matrix `[rows, cols]` as a GGUF file stores it: `rows` rows of `cols` values in the
/// blocks of `ggml_type`, row after row.
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a> {
    pub ggml_type: GgmlType,
    pub bytes: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

impl<'a> Matrix<'a> {
    /// The matrix of `bytes`, checked: a type [`nucleus_gguf::can_dequantize`] reads, rows of
    /// whole blocks, and exactly `rows` of them.
    pub fn new(ggml_type: GgmlType, bytes: &'a [u8], rows: usize, cols: usize) -> Result<Self, String> {
        if !nucleus_gguf::can_dequantize(ggml_type) {
            return Err(format!("the CPU engine cannot read {ggml_type} weights"));
        }
        let (block, block_bytes) = ggml_type.block_layout();
        if cols == 0 || !(cols as u64).is_multiple_of(block) {
            return Err(format!("rows of {cols} {ggml_type} values are not whole blocks of {block}"));
        }
        let row_bytes = cols / block as usize * block_bytes as usize;
        if bytes.len() != rows * row_bytes {
            return Err(format!("{} bytes for {rows} rows of {row_bytes}", bytes.len()));
        }
        Ok(Self { ggml_type, bytes, rows, cols })
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.bytes.len() / self.rows.max(1)
    }

    /// Row `row`'s bytes.
    pub fn row(&self, row: usize) -> &'a [u8] {
        let len = self.row_bytes();
        &self.bytes[row * len..(row + 1) * len]
    }

    /// Row `row` dequantized into `out` (`cols` values): an embedding lookup.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        assert!(dequantize_into(self.ggml_type, self.row(row), out), "checked readable in Matrix::new");
    }
}

/// The weights of `bytes` (whole blocks of `ggml_type`) into `out` as the tile of a pass of many
/// rows reads them: this CPU's own build where it has one (`dequant.rs`), which must write
/// `nucleus_gguf::dequantize_into`'s values bit for bit (`kernel_parity` holds every build to it).
///
/// # Panics
/// When `bytes` are not whole blocks or `out` is not as long as they are.
pub fn tile_weights(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
    crate::dequant::assert_whole_blocks(ggml_type, bytes, out);
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
            dot::Avx2::dequantize(ggml_type, bytes, out);
        }
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { avx2(ggml_type, bytes, out) };
    }
    #[cfg(target_arch = "wasm32")]
    return dot::Simd128::dequantize(ggml_type, bytes, out);
    #[allow(unreachable_code)]
    dot::Portable::dequantize(ggml_type, bytes, out);
}

/// `y = x · Wᵀ` (or `y += x · Wᵀ` with `accumulate`) for `x`: `[n, w.cols]` and `y`: `[n, w.rows]`,
/// row-major, the weight rows spread over the threads. One `x` row, or a few (`integer_rows_most`),
/// go through the integer kernel where the CPU has one (`integer/`): each row rounded to
/// integers as a decode step's is. More rows: each weight row is dequantized a [`TILE`] at a time
/// and every `x` row reads the tile, every sum f32, in the order of the columns within 32 lanes,
/// then the lanes pairwise, then the columns past the last whole 32 (`dot.rs`).
///
/// # Panics
/// When `x` or `y` is not whole rows of the matrix's shape.
pub fn matmul(w: &Matrix, x: &[f32], y: &mut [f32], accumulate: bool) {
    matmuls(x, &mut [(w, y)], accumulate);
}

/// Several products of the same rows `x` (`[n, cols]`, every matrix `cols` wide), as [`matmul`]
/// computes each, their rows spread over the threads together: one hand-over to the pool for the
/// queries, keys and values, or the gate and up projections, instead of one per matrix.
///
/// # Panics
/// When a matrix is not as wide as `x`'s rows, or an output not `[n, rows]`.
pub fn matmuls(x: &[f32], products: &mut [(&Matrix, &mut [f32])], accumulate: bool) {
    let Some(cols) = products.first().map(|(w, _)| w.cols) else { return };
    let n = x.len() / cols;
    for (w, y) in products.iter() {
        assert!(
            w.cols == cols && x.len() == n * cols && y.len() == n * w.rows,
            "x [{n}, {cols}] and y [{n}, {}] for a [{}, {}] matrix",
            y.len() / n.max(1),
            w.rows,
            w.cols
        );
    }
    if n == 0 {
        return;
    }
    let kernel = rows_kernel();
    let integer = integer_rows_kernel();
    // Which products go through the integer kernel, a row at a time (`integer_rows_most`), and
    // which, of more rows, through the integer kernel of rows in lanes (`integer_lanes_kernel`).
    let in_integers = |w: &Matrix| integer.is_some() && n <= integer_rows_most(w.ggml_type);
    let in_lanes = |w: &Matrix| !in_integers(w) && integer_lanes_kernel(w.ggml_type, n).is_some();
    // The integer products need each row in integers, rounded once per scale block that the
    // products here read (`IntegerRow::scale_block`): per 256 values for the K-quants, per 32 for
    // the 32-value formats. `rounded[k][r]`: x row r rounded for the kth scale block wanted.
    let wanted = |block: usize, wants: &dyn Fn(&Matrix) -> bool| {
        products.iter().any(|(w, _)| wants(w) && IntegerRow::scale_block(w.ggml_type) == Some(block))
    };
    let rounded: Vec<Vec<IntegerRow>> = [integer::SUPER_BLOCK, integer::BLOCK]
        .into_iter()
        .filter(|&block| wanted(block, &in_integers))
        .map(|block| {
            let types = || products.iter().filter(|(w, _)| in_integers(w)).map(|(w, _)| w.ggml_type);
            x.chunks_exact(cols).map(|x| IntegerRow::for_types(x, block, types())).collect()
        })
        .collect();
    let rounded_for = |w: &Matrix| {
        let block = IntegerRow::scale_block(w.ggml_type).filter(|_| in_integers(w))?;
        Some((integer?, rounded.iter().find(|rows| rows[0].block() == block)?.as_slice()))
    };
    let lanes =
        InLanes::new(x, cols, [integer::SUPER_BLOCK, integer::BLOCK].into_iter().filter(|&b| wanted(b, &in_lanes)));
    // A row at a time (one x row, or a few in integers), a product is one pass over its weights:
    // each thread takes long runs of rows, the products' rows counted together. Several x rows
    // through the tile: each product's rows shared evenly, in tasks of at least a few fours.
    let by_rows = |w: &Matrix| n == 1 || in_integers(w);
    let rows_per_task = decode_rows_per_task(products.iter().filter(|(w, _)| by_rows(w)).map(|(w, _)| w.rows).sum());
    let tasks = products
        .iter_mut()
        .flat_map(|(w, y)| {
            let per_task = if by_rows(w) { rows_per_task } else { prefill_rows_per_task(w.rows, threads()) };
            Columns::of(y, n, w.rows, per_task).map(move |columns| (&**w, columns))
        })
        .collect();
    // Each task writes its weight rows' outputs of every x row in place.
    for_each_task(tasks, |(w, mut columns)| match rounded_for(w) {
        // Many x rows in integers, in lanes.
        None if in_lanes(w) => {
            integer_lanes_kernel(w.ggml_type, n).expect("checked")(w, &lanes, &mut columns, accumulate)
        }
        // One x row: the task's weight rows in one pass (two streams from memory, `integer_rows`).
        Some((integer, [rounded])) => integer(w, rounded, columns.first, columns.row(0), accumulate),
        // A few: a run of weight rows for each x row in turn, read from the cache after the first.
        Some((integer, rounded)) => {
            let (first, len) = (columns.first, columns.len);
            for from in (0..len).step_by(INTEGER_ROWS_RUN) {
                let count = INTEGER_ROWS_RUN.min(len - from);
                for (r, rounded) in rounded.iter().enumerate() {
                    integer(w, rounded, first + from, &mut columns.row(r)[from..from + count], accumulate);
                }
            }
        }
        None if n == 1 => kernel(w, x, 1, columns.first, Out::Row(columns.row(0)), accumulate),
        None => kernel(w, x, n, columns.first, Out::Columns(columns), accumulate),
    });
}

/// Where a kernel writes the outputs of its weight rows `first..`.
enum Out<'a> {
    /// One x row: the weight rows' outputs in order.
    Row(&'a mut [f32]),
    /// Several: the weight rows' columns of `y`.
    Columns(Columns<'a>),
}

/// Columns `first..first + len` of an output `y` (`[n, rows]`): one task's share of a product,
/// written in place (through a copy in `[row, n]` order and a reordering after, that copy
/// and its zeroing were 7 % of SmolLM2's 32-token prefill).
struct Columns<'a> {
    y: *mut f32,
    n: usize,
    rows: usize,
    first: usize,
    len: usize,
    _y: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: each `Columns` writes only its own columns (`put`), which no other one of the same `y`
// holds (`Columns::of`), of a `y` borrowed for as long as it lives.
unsafe impl Send for Columns<'_> {}

impl<'a> Columns<'a> {
    /// `y` (`[n, rows]`) in runs of `per_task` columns.
    fn of(y: &'a mut [f32], n: usize, rows: usize, per_task: usize) -> impl Iterator<Item = Columns<'a>> + 'a {
        assert!(y.len() == n * rows && per_task > 0);
        let y = y.as_mut_ptr();
        (0..rows).step_by(per_task).map(move |first| Columns {
            y,
            n,
            rows,
            first,
            len: per_task.min(rows - first),
            _y: std::marker::PhantomData,
        })
    }

    /// X row `r`'s outputs of this task's weight rows.
    #[inline(always)]
    fn row(&mut self, r: usize) -> &mut [f32] {
        assert!(r < self.n);
        // SAFETY: `r·rows + first + len <= n·rows`, `y`'s length, in columns no other `Columns` of
        // `y` writes (`of`), borrowed from `self` while `y` is.
        unsafe { std::slice::from_raw_parts_mut(self.y.add(r * self.rows + self.first), self.len) }
    }

    /// Writes (or adds) `value` as x row `r`'s output of weight row `first + i`.
    #[inline(always)]
    fn put(&mut self, r: usize, i: usize, value: f32, accumulate: bool) {
        assert!(r < self.n && i < self.len);
        // SAFETY: `r·rows + first + i < n·rows`, `y`'s length, in columns no other `Columns` of
        // `y` writes (`of`), while `y` is borrowed.
        let target = unsafe { &mut *self.y.add(r * self.rows + self.first + i) };
        *target = if accumulate { *target + value } else { value };
    }
}

/// [`rows`] for one activation row of Q4_1, whose blocks go straight into the dot product instead
/// of through the tile (`add` takes one block's bytes and its 32 activations): the same products
/// in the same lanes, without writing the block out and reading it back. Where a build has no
/// integer products (`integer/`: x86 without AVX2, other CPUs), natively 1.5× as fast as the
/// tile in cache, 1.35× streaming from memory.
#[inline(always)]
fn rows_by_block<D: Dot>(
    w: &Matrix,
    x: &[f32],
    first: usize,
    out: &mut [f32],
    accumulate: bool,
    add: impl Fn(&mut D::Lanes, &[u8], &[f32]),
) {
    let block_bytes = w.ggml_type.block_layout().1 as usize;
    for (i, sum) in out.iter_mut().enumerate() {
        let mut lanes = D::zero();
        for (block, x) in w.row(first + i).chunks_exact(block_bytes).zip(x.chunks_exact(32)) {
            add(&mut lanes, block, x);
        }
        let value = D::total(lanes);
        *sum = if accumulate { *sum + value } else { value };
    }
}

/// The f16 at `at` in a block.
#[inline(always)]
fn half(block: &[u8], at: usize) -> f32 {
    nucleus_gguf::f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// The kernel computing weight rows `first..` (as many as `out` holds) for the `n` rows of `x`.
type RowsKernel = fn(&Matrix, &[f32], usize, usize, Out, bool);

/// The x86-64 builds of the kernels, narrowest first.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum X86 {
    /// The baseline, SSE2: the portable bodies as the compiler vectorises them.
    Sse2,
    /// AVX2 with FMA and F16C (which every AVX2 CPU has: the integer products read the 32-value
    /// formats' f16 scales through it; in software they were a third of a Q4_1 product).
    Avx2,
    /// AVX2 with AVX-VNNI: the integer products' scale and sum in one `vpdpwssd`.
    AvxVnni,
    /// AVX2 with AVX-512 F, BW and VNNI: the integer products 64 quants an instruction.
    Avx512,
}

#[cfg(target_arch = "x86_64")]
impl X86 {
    /// Each build with its name in `NUCLEUS_SIMD` and as a person reads it.
    const ALL: [(X86, &'static str, &'static str); 4] = [
        (X86::Sse2, "sse2", "SSE2"),
        (X86::Avx2, "avx2", "AVX2"),
        (X86::AvxVnni, "avx-vnni", "AVX2, AVX-VNNI"),
        (X86::Avx512, "avx512", "AVX2, AVX-512 VNNI"),
    ];

    /// Whether this CPU runs `self`.
    pub(crate) fn runs_here(self) -> bool {
        use std::arch::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        match self {
            X86::Sse2 => true,
            X86::Avx2 => avx2,
            X86::AvxVnni => avx2 && has!("avxvnni"),
            X86::Avx512 => avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vnni"),
        }
    }

    /// The build the kernels run: the widest this CPU has, or at most `NUCLEUS_SIMD`'s (`sse2`,
    /// `avx2`, `avx-vnni`), to measure or test a narrower one.
    pub(crate) fn chosen() -> X86 {
        static CHOSEN: std::sync::OnceLock<X86> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let most = std::env::var("NUCLEUS_SIMD")
                .ok()
                .and_then(|name| X86::ALL.iter().find(|(_, n, _)| *n == name).map(|&(build, _, _)| build))
                .unwrap_or(X86::Avx512);
            X86::ALL
                .iter()
                .map(|&(build, _, _)| build)
                .filter(|&b| b <= most && b.runs_here())
                .max()
                .unwrap_or(X86::Sse2)
        })
    }

    fn label(self) -> &'static str {
        X86::ALL.iter().find(|(build, _, _)| *build == self).map_or("SSE2", |(_, _, label)| label)
    }
}

/// Whether the kernels run their AVX2 build (or a wider one).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2() -> bool {
    X86::chosen() >= X86::Avx2
}

/// The vector instructions the kernels run with on this CPU, as a person reads them.
pub fn simd() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        X86::chosen().label()
    }
    #[cfg(target_arch = "aarch64")]
    {
        "NEON"
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        "WebAssembly relaxed SIMD"
    }
    #[cfg(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")))]
    {
        "WebAssembly SIMD"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "wasm32")))]
    {
        "no SIMD"
    }
}

/// The fastest build of the kernel this CPU runs.
fn rows_kernel() -> RowsKernel {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            return |w, x, n, first, out, accumulate| {
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                unsafe { rows_avx2(w, x, n, first, out, accumulate) }
            };
        }
    }
    #[cfg(target_arch = "wasm32")]
    {
        return |w, x, n, first, out, accumulate| {
            // SAFETY: a wasm module that holds SIMD instructions is refused as a whole by an engine
            // without them; every browser since 2021 (Safari 16.4) has them.
            unsafe { rows_simd128(w, x, n, first, out, accumulate) }
        };
    }
    #[allow(unreachable_code)]
    rows::<dot::Portable>
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(w: &Matrix, x: &[f32], n: usize, first: usize, out: Out, accumulate: bool) {
    rows::<dot::Avx2>(w, x, n, first, out, accumulate);
}

#[cfg(target_arch = "wasm32")]
#[target_feature(enable = "simd128")]
unsafe fn rows_simd128(w: &Matrix, x: &[f32], n: usize, first: usize, out: Out, accumulate: bool) {
    rows::<dot::Simd128>(w, x, n, first, out, accumulate);
}

/// The activation rows of a product in lanes for [`integer_lanes_kernel`], sixteen to a
/// [`integer::Lanes`], per scale block (none on a CPU without it).
struct InLanes {
    #[cfg(target_arch = "x86_64")]
    by_block: Vec<Vec<integer::Lanes>>,
}

impl InLanes {
    /// The rows of `x` (`cols` values each) rounded per each of `blocks` values and put in lanes,
    /// sixteen rows a task over the threads: the rounding is not small beside a narrow matrix's
    /// products (256 rows against SmolLM2's 576 × 1,536 Q4_1 down projection: 11 % of a
    /// profile's samples, the products 50 %).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn new(x: &[f32], cols: usize, blocks: impl Iterator<Item = usize>) -> Self {
        #[cfg(target_arch = "x86_64")]
        let by_block = blocks
            .map(|block| {
                let chunks: Vec<&[f32]> = x.chunks(integer::LANES * cols).collect();
                let mut lanes: Vec<Option<integer::Lanes>> = chunks.iter().map(|_| None).collect();
                for_each_task(lanes.iter_mut().zip(chunks).collect(), |(lanes, x)| {
                    let rows: Vec<IntegerRow> =
                        x.chunks_exact(cols).map(|x| IntegerRow::for_types(x, block, std::iter::empty())).collect();
                    *lanes = Some(integer::Lanes::new(&rows));
                });
                lanes.into_iter().map(|lanes| lanes.expect("every task ran")).collect()
            })
            .collect();
        Self {
            #[cfg(target_arch = "x86_64")]
            by_block,
        }
    }

    /// The lanes of the rows rounded per `block` values.
    #[cfg(target_arch = "x86_64")]
    fn of(&self, block: usize) -> &[integer::Lanes] {
        self.by_block.iter().find(|lanes| lanes[0].block() == block).expect("rows in lanes for each block wanted")
    }
}

/// The kernel computing a task's weight rows (its `Columns`) for many activation rows in integers,
/// sixteen to a register (`integer::Lanes`).
type LanesKernel = fn(&Matrix, &InLanes, &mut Columns, bool);

/// The kernel of `n` activation rows in integers for `ggml_type`, where this CPU has one (AVX-512
/// VNNI), the format goes through it (`integer::in_lanes`) and the rows fill the lanes
/// (`integer::fill_lanes`): one weight row's four quants broadcast against four values of
/// sixteen rows, 64 byte products an instruction (three digit places a value) where the tile
/// ([`rows_in_fours`]) first dequantizes every weight to f32, then makes eight multiply-adds an
/// instruction (ARCHITECTURE.md, "A prompt's products in integers").
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn integer_lanes_kernel(ggml_type: GgmlType, n: usize) -> Option<LanesKernel> {
    #[cfg(target_arch = "x86_64")]
    if X86::chosen() == X86::Avx512 && integer::in_lanes(ggml_type) && integer::fill_lanes(n) {
        return Some(|w, lanes, columns, accumulate| {
            // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512 F, BW and VNNI (`X86::chosen`).
            unsafe { integer_lanes_avx512(w, lanes, columns, accumulate) }
        });
    }
    None
}

/// [`integer_lanes_kernel`]'s body: four weight rows unpacked at a time, met by every block of
/// lanes; the lanes in runs that stay in the cache ([`X_ROWS_BYTES`]) while every four weight
/// rows of the task read them, each four unpacked again per run.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn integer_lanes_avx512(w: &Matrix, lanes: &InLanes, columns: &mut Columns, accumulate: bool) {
    let all = lanes.of(IntegerRow::scale_block(w.ggml_type).expect("an integer format"));
    let mut four = integer::FourRows::new(w.cols);
    let per_run = (X_ROWS_BYTES / (3 * integer::LANES * w.cols)).max(1);
    for (r, run) in all.chunks(per_run).enumerate() {
        for quad in 0..columns.len.div_ceil(4) {
            let count = (columns.len - 4 * quad).min(4);
            for j in 0..count {
                // SAFETY: as this function's.
                unsafe { integer::Avx512::unpack_row(w.ggml_type, w.row(columns.first + 4 * quad + j), &mut four, j) };
            }
            for (l, lanes) in run.iter().enumerate() {
                // SAFETY: as this function's.
                let sums = unsafe { integer::Avx512::lanes_products(&four, lanes) };
                let first_row = (r * per_run + l) * integer::LANES;
                for (j, sums) in sums.iter().enumerate().take(count) {
                    for (lane, &sum) in sums.iter().enumerate().take(lanes.rows) {
                        columns.put(first_row + lane, 4 * quad + j, sum, accumulate);
                    }
                }
            }
        }
    }
}

/// The kernel computing weight rows `first..` (as many as `out` holds) of a K-quant matrix for
/// one activation row rounded to integers (`integer/`).
type IntegerRowsKernel = fn(&Matrix, &IntegerRow, usize, &mut [f32], bool);

/// The fastest build of the integer kernel this CPU runs, where there is one: without AVX2 (or
/// wasm's SIMD) the tile is faster (SSE2, one thread, `matmul_speed -- 3584 1024`: Q4_K 4.5
/// GMAC/s through the tile against 1.2 in plain integer loops; Q6_K 2.8 against 1.9).
fn integer_rows_kernel() -> Option<IntegerRowsKernel> {
    #[cfg(target_arch = "x86_64")]
    {
        match X86::chosen() {
            X86::Avx512 => Some(|w, x, first, out, accumulate| {
                // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512 F, BW and VNNI (`X86::chosen`).
                unsafe { integer_rows_avx512(w, x, first, out, accumulate) }
            }),
            X86::AvxVnni => Some(|w, x, first, out, accumulate| {
                // SAFETY: the CPU has AVX2, FMA, F16C and AVX-VNNI (`X86::chosen`).
                unsafe { integer_rows_vnni(w, x, first, out, accumulate) }
            }),
            X86::Avx2 => Some(|w, x, first, out, accumulate| {
                // SAFETY: the CPU has AVX2, FMA and F16C (`X86::chosen`).
                unsafe { integer_rows_avx2(w, x, first, out, accumulate) }
            }),
            X86::Sse2 => None,
        }
    }
    #[cfg(target_arch = "wasm32")]
    {
        Some(|w, x, first, out, accumulate| {
            // SAFETY: as `rows_simd128`'s.
            unsafe { integer_rows_simd128(w, x, first, out, accumulate) }
        })
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    {
        None
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn integer_rows_avx2(w: &Matrix, x: &IntegerRow, first: usize, out: &mut [f32], accumulate: bool) {
    integer_rows::<integer::Avx2>(w, x, first, out, accumulate);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn integer_rows_vnni(w: &Matrix, x: &IntegerRow, first: usize, out: &mut [f32], accumulate: bool) {
    integer_rows::<integer::Vnni>(w, x, first, out, accumulate);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn integer_rows_avx512(w: &Matrix, x: &IntegerRow, first: usize, out: &mut [f32], accumulate: bool) {
    integer_rows::<integer::Avx512>(w, x, first, out, accumulate);
}

#[cfg(target_arch = "wasm32")]
#[target_feature(enable = "simd128")]
unsafe fn integer_rows_simd128(w: &Matrix, x: &IntegerRow, first: usize, out: &mut [f32], accumulate: bool) {
    #[cfg(target_feature = "relaxed-simd")]
    match integer::byte_dot() {
        integer::ByteDot::Accumulating => {
            integer_rows::<integer::Relaxed<integer::relaxed::Accumulating>>(w, x, first, out, accumulate)
        }
        integer::ByteDot::Paired => {
            integer_rows::<integer::Relaxed<integer::relaxed::Paired>>(w, x, first, out, accumulate)
        }
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    integer_rows::<integer::Simd128>(w, x, first, out, accumulate);
}

/// The integer kernel's one body, compiled into each build above. The rows go in two streams,
/// the first half's and the second's taken in turn: a decode product is one pass over its
/// weights, and where one stream through the rows left the output layer reading memory at 27
/// GB/s on this machine's two threads, two streams a thread read it at 33-34, as fast as plain
/// loads do (ARCHITECTURE.md, "Two streams a thread"). Each row's sum is the same either way.
#[inline(always)]
fn integer_rows<D: RowDot>(w: &Matrix, x: &IntegerRow, first: usize, out: &mut [f32], accumulate: bool) {
    let half = out.len() / 2;
    let (front, back) = out.split_at_mut(half);
    let (back, last) = back.split_at_mut(half);
    let row = |i: usize, sum: &mut f32| {
        let value = D::row_dot(w.ggml_type, w.row(first + i), x);
        *sum = if accumulate { *sum + value } else { value };
    };
    for (i, (a, b)) in front.iter_mut().zip(back).enumerate() {
        row(i, a);
        row(half + i, b);
    }
    if let [sum] = last {
        row(2 * half, sum);
    }
}

/// The kernel's one body, compiled into each build above.
#[inline(always)]
fn rows<D: Dot>(w: &Matrix, x: &[f32], n: usize, first: usize, out: Out, accumulate: bool) {
    let out = match out {
        Out::Row(out) => out,
        Out::Columns(columns) => return rows_in_fours::<D>(w, x, n, first, columns, accumulate),
    };
    debug_assert_eq!((n, x.len()), (1, w.cols), "one x row");
    // One activation row (a decode step) of Q4_1 (where a build has no integer products): the
    // block straight into the dot product; of the other formats, through the tile.
    if w.ggml_type == GgmlType::Q4_1 {
        return rows_by_block::<D>(w, x, first, out, accumulate, |lanes, block, x| {
            D::add_q4_1(lanes, half(block, 0), half(block, 2), block[4..20].try_into().expect("20-byte blocks"), x)
        });
    }
    let cols = w.cols;
    let (block, block_bytes) = w.ggml_type.block_layout();
    let tile_bytes = TILE / block as usize * block_bytes as usize;
    let whole = cols / 32 * 32;
    let mut tile = [0f32; TILE];
    for (i, sum) in out.iter_mut().enumerate() {
        let (mut lanes, mut tail) = (D::zero(), 0f32);
        for (t, bytes) in w.row(first + i).chunks(tile_bytes).enumerate() {
            let start = t * TILE;
            let len = (cols - start).min(TILE);
            let values = &mut tile[..len];
            D::dequantize(w.ggml_type, bytes, values);
            // Whole 32s in the lanes, the row's last few (a width not a multiple of 32) in order.
            let vector = whole.saturating_sub(start).min(len);
            let x = &x[start..start + len];
            D::add(&mut lanes, &values[..vector], &x[..vector]);
            tail += values[vector..].iter().zip(&x[vector..]).fold(0.0, |sum, (a, b)| sum + a * b);
        }
        let value = D::total(lanes) + tail;
        *sum = if accumulate { *sum + value } else { value };
    }
}

/// [`rows`] for several x rows: four weight rows at a time, dequantized whole once, met by the x
/// rows four at a time in registers (`Dot::dot16`; with AVX-512 eight loads for sixteen
/// multiply-adds), then two at a time (`Dot::dot8`: six loads for eight; an odd last row by
/// `Dot::dot4`), so x (a prefill's rows, beyond L1) is read an eighth as often: 1.5-1.7x the
/// GMAC/s on 32 rows (`matmul_speed -- 3584 1024`; ARCHITECTURE.md). Each sum is added across its
/// lanes once, at the end of the rows. One x row (a decode step) stays a weight row at a time:
/// grouped, it fell from 18 GMAC/s to 12 on Q8_0. The x rows go in blocks of [`x_rows_in_cache`],
/// which stay in the cache while every group of four weight rows reads them (each group
/// dequantized again per block).
#[inline(always)]
fn rows_in_fours<D: Dot>(w: &Matrix, x: &[f32], n: usize, first: usize, mut out: Columns, accumulate: bool) {
    let span = x_rows_in_cache(w.cols).min(n);
    for from in (0..n).step_by(span) {
        let m = span.min(n - from);
        fours_in_block::<D>(w, &x[from * w.cols..(from + m) * w.cols], m, first, (&mut out, from), accumulate);
    }
}

/// [`rows_in_fours`] for one block of `n` x rows. `sums[r · 4 + j]`: x row r against weight row j
/// of the four; x row r's sums go to row `from + r` of `out`. The four rows are dequantized whole
/// and each sum is added across once (a tile at a time, each tile's sums added into lanes kept in
/// memory, zeroed per group, was 12-20 % slower on every format: `matmul_speed`).
#[inline(always)]
fn fours_in_block<D: Dot>(
    w: &Matrix,
    x: &[f32],
    n: usize,
    first: usize,
    (out, from): (&mut Columns, usize),
    accumulate: bool,
) {
    let cols = w.cols;
    let (block, block_bytes) = w.ggml_type.block_layout();
    let tile_bytes = TILE / block as usize * block_bytes as usize;
    // Whole 32s in the products, the row's last few (a width not a multiple of 32) in order.
    let whole = cols / 32 * 32;
    let mut weights = vec![0f32; 4 * cols];
    let mut sums = vec![0f32; 4 * n];
    for i4 in 0..out.len.div_ceil(4) {
        let count = (out.len - 4 * i4).min(4);
        // Each row a tile at a time (whole rows at once, the compiler inserted Q4_1's bytes one
        // by one). The tiles by index: zipped with the row's bytes in chunks, the zip was a call
        // with two integer divisions per row (ARCHITECTURE.md, "No division per tile").
        for (j, row) in weights.chunks_exact_mut(cols).enumerate().take(count) {
            let bytes = w.row(first + 4 * i4 + j);
            for (t, values) in row.chunks_mut(TILE).enumerate() {
                D::dequantize(w.ggml_type, &bytes[t * tile_bytes..((t + 1) * tile_bytes).min(bytes.len())], values);
            }
        }
        // The four weight rows' whole 32s, and x row `r`'s (arrays written out: built with `map`,
        // a call each that the compiler kept out of line).
        let row = |j: usize| &weights[j * cols..j * cols + whole];
        let rows = [row(0), row(1), row(2), row(3)];
        let vectors = |r: usize| &x[r * cols..r * cols + whole];
        let quads = if count == 4 { n / 4 * 4 } else { 0 };
        for r in (0..quads).step_by(4) {
            let four = D::dot16([vectors(r), vectors(r + 1), vectors(r + 2), vectors(r + 3)], rows);
            sums[4 * r..4 * r + 16].copy_from_slice(&four);
        }
        let pairs = if count == 4 { quads + (n - quads) / 2 * 2 } else { 0 };
        for r in (quads..pairs).step_by(2) {
            sums[4 * r..4 * r + 8].copy_from_slice(&D::dot8([vectors(r), vectors(r + 1)], rows));
        }
        // The rows not done in pairs above.
        for r in pairs..n {
            if count == 4 {
                sums[4 * r..4 * r + 4].copy_from_slice(&D::dot4(vectors(r), rows));
            } else {
                for (j, sum) in sums[4 * r..4 * r + count].iter_mut().enumerate() {
                    let mut lanes = D::zero();
                    D::add(&mut lanes, rows[j], vectors(r));
                    *sum = D::total(lanes);
                }
            }
        }
        if whole < cols {
            for r in 0..n {
                let x = &x[r * cols + whole..(r + 1) * cols];
                for (j, sum) in sums[4 * r..4 * r + count].iter_mut().enumerate() {
                    let weights = &weights[j * cols + whole..(j + 1) * cols];
                    *sum += weights.iter().zip(x).fold(0.0, |sum, (a, b)| sum + a * b);
                }
            }
        }
        for r in 0..n {
            for j in 0..count {
                out.put(from + r, 4 * i4 + j, sums[4 * r + j], accumulate);
            }
        }
    }
}

/// How many x rows of `cols` values [`rows_in_fours`] multiplies by its weight rows before the
/// next ones (a multiple of four, so the fours and pairs fall as without blocks): as many as fill
/// [`X_ROWS_BYTES`].
fn x_rows_in_cache(cols: usize) -> usize {
    (X_ROWS_BYTES / (4 * cols)).max(4) / 4 * 4
}

/// The x rows [`rows_in_fours`] keeps in the cache while each group of four weight rows reads
/// them (the weight tiles dequantized again for each block of them). Natively half the 1 MiB L2
/// of this machine's cores: a prefill's x rows (512 tokens of 1,024 values are 2 MiB) were read
/// from L3 once per four weight rows; in blocks, one thread's Q4_K products of Qwen3.5-0.8B's
/// shapes over 512 rows ran 17.6 -> 19.3 GMAC/s (3,584 x 1,024) and 18.9 -> 18.9 (1,024 x 3,584),
/// best of four (`matmul_speed -- 3584 1024 Q4_K 512`); the whole 512-token prefill of that model
/// on two threads 7-9 % faster (`nucleus bench`, three pairs). In wasm no blocks: V8's loop, not the
/// cache, bounds it (relaxed SIMD 10.4-10.8 GMAC/s either way) and the tiles' second conversion
/// cost more than it saved in blocks of 128 KiB or less. The prompt's rows in lanes
/// ([`integer_lanes_avx512`], three bytes a value) go in runs of the same size.
const X_ROWS_BYTES: usize = if cfg!(target_family = "wasm") { usize::MAX } else { 512 << 10 };

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode product goes to each thread in at most two runs of whole 64-byte output lines.
    #[test]
    fn a_decode_product_is_few_long_runs_of_rows() {
        for rows in [1, 16, 192, 576 + 192 + 192, 1536, 49_152, 262_144] {
            let per_task = decode_rows_per_task(rows);
            assert!(per_task.is_multiple_of(16) && per_task > 0, "{rows} rows: {per_task} a task");
            assert!(rows.div_ceil(per_task) <= threads() * DECODE_TASKS_PER_THREAD, "{rows} rows: {per_task} a task");
            assert!(per_task < rows + 16 * threads() * DECODE_TASKS_PER_THREAD, "{rows} rows: {per_task} a task");
        }
    }

    /// A prefill product gives each thread as many rows as the others, within a tenth, in tasks
    /// of at least `ROWS_PER_TASK` whole fours, on the models' shapes and 1 to 8 threads; a matrix
    /// of fewer rows than a four a thread (none, too) still in tasks of some rows.
    #[test]
    fn a_prefill_product_is_shared_evenly() {
        for threads in [1, 2, 3, 4, 8] {
            for rows in [0, 3, 192, 256, 576, 640, 1024, 1152, 1536, 2048, 3584, 6912, 49_152, 262_144] {
                let per_task = prefill_rows_per_task(rows, threads);
                let tasks = rows.div_ceil(per_task);
                let most = tasks.div_ceil(threads) * per_task;
                let shown = format!("{rows} rows on {threads} threads: {tasks} tasks of {per_task}");
                assert!(per_task.is_multiple_of(4) && per_task > 0, "{shown}");
                assert!(per_task >= ROWS_PER_TASK.min(rows / threads), "{shown}");
                if rows >= 4 * threads {
                    assert!(most * 10 <= rows.div_ceil(threads) * 11, "{shown}: one thread takes {most}");
                }
            }
        }
    }

    /// A matrix of no rows is a product with no outputs, for one x row, a few and many.
    #[test]
    fn a_matrix_of_no_rows_has_no_outputs() {
        let w = Matrix::new(GgmlType::Q4K, &[], 0, 256).unwrap();
        for n in [1, 2, 7] {
            matmul(&w, &vec![1.0; n * 256], &mut [], false);
        }
    }

    /// Many x rows in lanes (`integer_lanes_kernel`): every format it reads, within 1e-5 of the
    /// f64 product of the dequantized weights, on rows of an odd number of 32-value blocks and of
    /// whole 256s, lanes full and part full, in one run and in several, a task's last four weight
    /// rows short, accumulating into `y` and not; each row's sums the same whichever lanes it
    /// falls in.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn many_rows_in_lanes_equal_the_reference() {
        let n = 3 * integer::LANES - 3;
        let formats: Vec<GgmlType> =
            (0..64).filter_map(GgmlType::from_id).filter(|&t| integer_lanes_kernel(t, n).is_some()).collect();
        if formats.is_empty() {
            return;
        }
        assert!(formats.len() >= 6, "{formats:?}");
        let height = 4 * ROWS_PER_TASK + 6;
        // Rows of 11,264 values: lanes in runs of one register each (`X_ROWS_BYTES`).
        let shapes = formats.iter().flat_map(|&t| {
            let widths: &[usize] = if t.block_layout().0 == 256 { &[1280, 11_264] } else { &[1056] };
            widths.iter().map(move |&cols| (t, cols))
        });
        for (ggml_type, cols) in shapes {
            let (block, block_bytes) = ggml_type.block_layout();
            let mut bytes: Vec<u8> =
                (0..height * cols / block as usize * block_bytes as usize).map(|i| (i * 37 % 251) as u8).collect();
            // Finite f16 scales (and minimums).
            for b in bytes.chunks_exact_mut(block_bytes as usize) {
                b[0..2].copy_from_slice(&0x2000u16.to_le_bytes());
                if matches!(ggml_type, GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K) {
                    b[2..4].copy_from_slice(&0xa000u16.to_le_bytes());
                }
            }
            let w = Matrix::new(ggml_type, &bytes, height, cols).unwrap();
            let x: Vec<f32> =
                (0..n * cols).map(|i| (i as f32 * 0.37).sin() * if i % 97 == 0 { 9.0 } else { 1.0 }).collect();
            let expected = crate::reference::matmul(&w, &x);
            let scale = expected.iter().fold(1f64, |m, v| m.max(v.abs()));
            let held: Vec<f32> = (0..n * height).map(|i| i as f32 * 0.5).collect();
            for accumulate in [false, true] {
                let mut y = held.clone();
                matmul(&w, &x, &mut y, accumulate);
                for (i, (&got, &want)) in y.iter().zip(&expected).enumerate() {
                    let want = want + if accumulate { f64::from(held[i]) } else { 0.0 };
                    let off = (f64::from(got) - want).abs();
                    assert!(
                        off <= 1e-5 * scale.max(want.abs()),
                        "{ggml_type}: y[{i}] = {got}, reference {want}, accumulate {accumulate}"
                    );
                }
            }
            // The last rows alone (fewer lanes, at other places in them): the same sums.
            let (mut all, tail) = (vec![0f32; n * height], integer::LANES);
            matmul(&w, &x, &mut all, false);
            let mut alone = vec![0f32; tail * height];
            matmul(&w, &x[(n - tail) * cols..], &mut alone, false);
            assert!(alone[..] == all[(n - tail) * height..], "{ggml_type}: a row's sums depend on its lane");
        }
    }

    /// A few x rows in integers: each row's outputs are those of the row alone (a decode step's
    /// product), bit for bit, added to what `y` held where asked, in tasks of several runs of
    /// weight rows and a short last one.
    #[test]
    fn a_few_rows_in_integers_sum_each_row_as_alone() {
        if integer_rows_kernel().is_none() {
            return;
        }
        let (height, cols) = (300, 512);
        // Every format the integer kernel reads.
        let formats: Vec<GgmlType> =
            (0..64).filter_map(GgmlType::from_id).filter(|&t| IntegerRow::scale_block(t).is_some()).collect();
        assert!(formats.len() >= 8, "{formats:?}");
        for ggml_type in formats {
            let (block, block_bytes) = ggml_type.block_layout();
            let mut bytes: Vec<u8> =
                (0..height * cols / block as usize * block_bytes as usize).map(|i| (i * 37 % 251) as u8).collect();
            // Finite f16 scales (and minimums) wherever a block keeps them.
            for b in bytes.chunks_exact_mut(block_bytes as usize) {
                let at = if ggml_type == GgmlType::Q6K { 208 } else { 0 };
                b[at..at + 2].copy_from_slice(&0x2000u16.to_le_bytes());
                if matches!(ggml_type, GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K) {
                    b[2..4].copy_from_slice(&0xa000u16.to_le_bytes());
                }
            }
            let w = Matrix::new(ggml_type, &bytes, height, cols).unwrap();
            let most = integer_rows_most(ggml_type);
            assert!(most >= 2, "{ggml_type}: {most}");
            for n in 2..=most {
                let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.37).sin()).collect();
                let held: Vec<f32> = (0..n * height).map(|i| i as f32 * 0.5).collect();
                for accumulate in [false, true] {
                    let mut y = held.clone();
                    matmul(&w, &x, &mut y, accumulate);
                    for (r, (x, y)) in x.chunks_exact(cols).zip(y.chunks_exact(height)).enumerate() {
                        let mut alone = held[r * height..(r + 1) * height].to_vec();
                        matmul(&w, x, &mut alone, accumulate);
                        assert!(alone == y, "{ggml_type}, x row {r} of {n}, accumulating {accumulate}");
                    }
                }
            }
        }
    }

    /// The portable build of the by-block formats and of the blocks of x rows by four weight rows
    /// (what a CPU without AVX2 runs) against the matrix dequantized whole, for one x row and for
    /// three and five (pairs, an odd row, and a last group of one weight row): the SIMD builds are
    /// checked by `tests/parity.rs` and in Chromium.
    #[test]
    fn the_portable_kernel_reads_blocks_as_the_dequantizer_does() {
        let (height, cols) = (5, 96);
        for ggml_type in [GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q4_0] {
            let (block, block_bytes) = ggml_type.block_layout();
            let mut bytes: Vec<u8> =
                (0..height * cols / block as usize * block_bytes as usize).map(|i| (i * 37 % 251) as u8).collect();
            // Scales (and Q4_1's minimum) of about 0.008, finite.
            for b in bytes.chunks_exact_mut(block_bytes as usize) {
                b[..2].copy_from_slice(&0x2000u16.to_le_bytes());
                if ggml_type == GgmlType::Q4_1 {
                    b[2..4].copy_from_slice(&0xa000u16.to_le_bytes());
                }
            }
            let w = Matrix::new(ggml_type, &bytes, height, cols).unwrap();
            let mut dense = vec![0.0; height * cols];
            assert!(dequantize_into(ggml_type, &bytes, &mut dense));
            for n in [1, 3, 5] {
                let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.37).sin()).collect();
                // `y` is `[n, weight row]`.
                let mut y = vec![0.0; height * n];
                let out = match n {
                    1 => Out::Row(&mut y),
                    _ => Out::Columns(Columns::of(&mut y, n, height, height).next().expect("one task")),
                };
                rows::<dot::Portable>(&w, &x, n, 0, out, false);
                for (at, &got) in y.iter().enumerate() {
                    let (r, o) = (at / height, at % height);
                    let weights = &dense[o * cols..(o + 1) * cols];
                    let want: f64 =
                        weights.iter().zip(&x[r * cols..(r + 1) * cols]).map(|(&a, &b)| f64::from(a * b)).sum();
                    assert!(
                        (f64::from(got) - want).abs() < 1e-4,
                        "{ggml_type} weight row {o}, x row {r} of {n}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
