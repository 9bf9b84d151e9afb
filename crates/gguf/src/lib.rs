//! A reader for GGUF, the file format of llama.cpp, and a dequantizer for its common tensor types.
//!
//! The crate does no I/O: [`GgufFile::parse`] takes the bytes of a whole file (mapped from disk by
//! the CLI, fetched by the browser) and borrows them; [`GgufFile::parse_shared`] takes them
//! shared ([`SharedBytes`]), so that a model can keep its tensors where they lie
//! ([`GgufFile::shared_tensor_bytes`]) instead of copying them; [`TensorStream`] gives a file's
//! tensors one at a time as its bytes are read in order, never the whole file at once (the
//! browser's WebGPU load). Every length, count and offset read from the
//! file is checked against the bytes actually present, so a truncated or corrupt file gives a
//! [`GgufError`] naming what is wrong, never a panic.
//!
//! Layout of a GGUF file (versions 2 and 3, little-endian):
//!
//! ```text
//! magic "GGUF" | version u32 | tensor_count u64 | metadata_count u64
//! metadata_count x (key: string, value_type u32, value)
//! tensor_count   x (name: string, n_dims u32, dims u64 x n_dims, ggml_type u32, offset u64)
//! padding to `general.alignment` (default 32)
//! tensor data; each tensor at data_start + offset
//! ```
//! A string is a u64 byte length followed by UTF-8 bytes. `dims[0]` varies fastest: a matrix
//! with `rows` rows of `cols` columns has `dims = [cols, rows]`.

mod dequant;
mod shared;
mod stream;
mod types;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

pub use dequant::{can_dequantize, dequantize, dequantize_into, f16_to_f32, k_scale_min};
pub use shared::{SharedBytes, SharedSlice};
pub use stream::{Piece, TensorStream, Wanted};
pub use types::{GgmlType, file_type_name};

/// Everything that can be wrong with a GGUF file.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GgufError {
    #[error("not a GGUF file: the first four bytes are {0:?}, expected \"GGUF\"")]
    BadMagic([u8; 4]),
    #[error("unsupported GGUF version {0} (versions 2 and 3 are supported)")]
    UnsupportedVersion(u32),
    #[error("truncated GGUF file: {what} needs bytes up to offset {needed}, but the file has {len} bytes")]
    Truncated { what: String, needed: u64, len: u64 },
    #[error("corrupt GGUF file: {0}")]
    Corrupt(String),
    #[error("unsupported tensor type {0} in tensor '{1}'")]
    UnknownTensorType(u32, String),
    #[error("tensor '{name}' has type {ggml_type}, which this build cannot dequantize")]
    UnsupportedDequantization { name: String, ggml_type: GgmlType },
    #[error("metadata key '{0}' is missing")]
    MissingKey(String),
    #[error("metadata key '{key}' has type {found}, expected {expected}")]
    WrongType { key: String, expected: &'static str, found: &'static str },
    #[error("tensor '{0}' is missing")]
    MissingTensor(String),
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<MetadataValue>),
}

impl MetadataValue {
    /// The GGUF name of this value's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "u8",
            Self::I8(_) => "i8",
            Self::U16(_) => "u16",
            Self::I16(_) => "i16",
            Self::U32(_) => "u32",
            Self::I32(_) => "i32",
            Self::U64(_) => "u64",
            Self::I64(_) => "i64",
            Self::F32(_) => "f32",
            Self::F64(_) => "f64",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array(_) => "array",
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetadataValue]> {
        match self {
            Self::Array(values) => Some(values),
            _ => None,
        }
    }
}

impl fmt::Display for MetadataValue {
    /// Scalars in full; arrays as their length and first few items (vocabularies are long).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::String(s) if s.len() > 80 => write!(f, "{:?}... ({} bytes)", truncate_chars(s, 60), s.len()),
            Self::String(s) => write!(f, "{s:?}"),
            Self::Array(values) => {
                write!(f, "[")?;
                for (i, v) in values.iter().take(4).enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                if values.len() > 4 {
                    write!(f, ", ... {} items", values.len())?;
                }
                write!(f, "]")
            }
            Self::Bool(v) => write!(f, "{v}"),
            Self::F32(v) => write!(f, "{v}"),
            Self::F64(v) => write!(f, "{v}"),
            other => write!(f, "{}", other.as_u64().map_or_else(|| format!("{:?}", other), |v| v.to_string())),
        }
    }
}

fn truncate_chars(s: &str, max_chars: usize) -> &str {
    s.char_indices().nth(max_chars).map_or(s, |(i, _)| &s[..i])
}

/// Where one tensor lives and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// GGML order: `dims[0]` varies fastest.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    pub fn element_count(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes the tensor occupies in the file.
    pub fn byte_len(&self) -> u64 {
        let (block, bytes) = self.ggml_type.block_layout();
        self.element_count() / block * bytes
    }

    /// Rows and columns of a matrix stored row-major (`dims = [cols, rows]`); a vector is one row.
    pub fn matrix_shape(&self) -> (usize, usize) {
        let cols = self.dims.first().copied().unwrap_or(1) as usize;
        let rows = self.dims.iter().skip(1).product::<u64>() as usize;
        (rows, cols)
    }
}

/// A GGUF file's header: its version, metadata, tensor table and where the data starts. Read
/// from a whole file (a [`GgufFile`] derefs to its header) or from the file's first bytes alone
/// ([`GgufHeader::parse`]: a download's first chunks): enough to know a model's shape and what it
/// will need before the rest is downloaded.
#[derive(Debug)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: BTreeMap<String, MetadataValue>,
    pub tensors: Vec<TensorInfo>,
    /// Alignment of tensor data (from `general.alignment`, default 32).
    pub alignment: u64,
    /// Offset of the data section within the file.
    pub data_offset: u64,
    /// Bytes of the whole file; every tensor lies inside them.
    pub file_len: u64,
}

/// A parsed GGUF file borrowing its bytes.
#[derive(Debug)]
pub struct GgufFile<'a> {
    header: GgufHeader,
    bytes: Source<'a>,
}

/// What a parsed file reads its tensors from.
#[derive(Debug)]
enum Source<'a> {
    /// Borrowed, in one piece ([`GgufFile::parse`]).
    Whole(&'a [u8]),
    /// Shared, perhaps in parts ([`GgufFile::parse_shared`]): tensors are read where they lie.
    Shared(&'a SharedBytes),
}

impl std::ops::Deref for GgufFile<'_> {
    type Target = GgufHeader;

    fn deref(&self) -> &GgufHeader {
        &self.header
    }
}

const GGUF_MAGIC: [u8; 4] = *b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;

impl GgufHeader {
    /// Parses the header from `prefix`, the first bytes of a file of `file_len` bytes, and checks
    /// that every tensor lies inside `file_len`. A prefix that ends inside the header gives
    /// [`GgufError::Truncated`] with `len` the prefix's length and `needed` past it: read at least
    /// that many bytes and parse again.
    pub fn parse(prefix: &[u8], file_len: u64) -> Result<Self, GgufError> {
        let prefix = &prefix[..prefix.len().min(usize::try_from(file_len).unwrap_or(usize::MAX))];
        let mut reader = Reader { bytes: prefix, pos: 0, file_len };
        let magic: [u8; 4] = reader.take(4, "the magic number")?.try_into().expect("4 bytes");
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic(magic));
        }
        let version = reader.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let tensor_count = reader.u64("the tensor count")?;
        let metadata_count = reader.u64("the metadata count")?;
        // Each entry takes at least 8 bytes: a count beyond that is corruption, not a reason to allocate.
        reader.check_count(tensor_count, 8, "tensor count")?;
        reader.check_count(metadata_count, 8, "metadata count")?;

        let mut metadata = BTreeMap::new();
        for _ in 0..metadata_count {
            let key = reader.string("a metadata key")?;
            let value_type = reader.u32(&format!("the type of metadata '{key}'"))?;
            let value = reader.value(value_type, &key, 0)?;
            metadata.insert(key, value);
        }

        // Reserved for what the bytes at hand can hold: a header read from a file's first bytes
        // checks counts against the whole file's length, which a corrupt header could make huge.
        let mut tensors = Vec::with_capacity(reader.at_most(tensor_count, 8));
        for _ in 0..tensor_count {
            let name = reader.string("a tensor name")?;
            let n_dims = reader.u32(&format!("the rank of tensor '{name}'"))?;
            if n_dims == 0 || n_dims > 4 {
                return Err(GgufError::Corrupt(format!("tensor '{name}' has {n_dims} dimensions (1 to 4 allowed)")));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(reader.u64(&format!("the shape of tensor '{name}'"))?);
            }
            let type_id = reader.u32(&format!("the type of tensor '{name}'"))?;
            let ggml_type =
                GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType(type_id, name.clone()))?;
            let offset = reader.u64(&format!("the offset of tensor '{name}'"))?;
            tensors.push(TensorInfo { name, dims, ggml_type, offset });
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(value) => match value.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() => a,
                _ => return Err(GgufError::Corrupt(format!("general.alignment is {value}, not a power of two"))),
            },
        };
        let data_offset = (reader.pos as u64).div_ceil(alignment) * alignment;
        let header = Self { version, metadata, tensors, alignment, data_offset, file_len };
        for tensor in &header.tensors {
            header.check_tensor(tensor)?;
        }
        Ok(header)
    }

    fn check_tensor(&self, tensor: &TensorInfo) -> Result<(), GgufError> {
        let (block, _) = tensor.ggml_type.block_layout();
        let elements = tensor.dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(|| {
            GgufError::Corrupt(format!("tensor '{}' has an impossible shape {:?}", tensor.name, tensor.dims))
        })?;
        if !tensor.dims[0].is_multiple_of(block) {
            return Err(GgufError::Corrupt(format!(
                "tensor '{}' has rows of {} elements, not a multiple of the {} block size {block}",
                tensor.name, tensor.dims[0], tensor.ggml_type
            )));
        }
        if !tensor.offset.is_multiple_of(self.alignment) {
            return Err(GgufError::Corrupt(format!(
                "tensor '{}' is not aligned to {} bytes",
                tensor.name, self.alignment
            )));
        }
        let end = self
            .data_offset
            .checked_add(tensor.offset)
            .and_then(|start| start.checked_add(elements / block * tensor.ggml_type.block_layout().1))
            .ok_or_else(|| GgufError::Corrupt(format!("tensor '{}' has an impossible offset", tensor.name)))?;
        if end > self.file_len {
            return Err(GgufError::Truncated {
                what: format!("tensor '{}'", tensor.name),
                needed: end,
                len: self.file_len,
            });
        }
        Ok(())
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.metadata.get(key)
    }

    fn require(&self, key: &str) -> Result<&MetadataValue, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey(key.to_string()))
    }

    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let value = self.require(key)?;
        value.as_str().ok_or(GgufError::WrongType {
            key: key.to_string(),
            expected: "string",
            found: value.type_name(),
        })
    }

    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let value = self.require(key)?;
        value.as_u64().ok_or(GgufError::WrongType {
            key: key.to_string(),
            expected: "unsigned integer",
            found: value.type_name(),
        })
    }

    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        let value = self.require(key)?;
        value.as_f64().ok_or(GgufError::WrongType {
            key: key.to_string(),
            expected: "number",
            found: value.type_name(),
        })
    }

    pub fn get_array(&self, key: &str) -> Result<&[MetadataValue], GgufError> {
        let value = self.require(key)?;
        value.as_array().ok_or(GgufError::WrongType {
            key: key.to_string(),
            expected: "array",
            found: value.type_name(),
        })
    }

    /// The strings of an array-of-strings key (a vocabulary, merges).
    pub fn get_string_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.get_array(key)?
            .iter()
            .map(|v| {
                v.as_str().ok_or(GgufError::WrongType {
                    key: key.to_string(),
                    expected: "array of strings",
                    found: v.type_name(),
                })
            })
            .collect()
    }
}

impl GgufHeader {
    /// Where to split the file into parts of at most `max_part` bytes each, every part but the
    /// last ending where a tensor begins (so each tensor and the header lie in one part): the
    /// parts' ranges, in order, covering the file. A tensor longer than `max_part` is a part of
    /// its own. (The browser holds a file bigger than one wasm32 allocation so: [`SharedBytes`].)
    pub fn parts(&self, max_part: u64) -> Vec<Range<u64>> {
        let mut starts: Vec<u64> = self.tensors.iter().map(|t| self.data_offset + t.offset).collect();
        starts.sort_unstable();
        let mut parts = Vec::new();
        let mut start = 0;
        let mut last = 0;
        for &tensor in starts.iter().chain([&self.file_len]) {
            if tensor - start > max_part && last > start {
                parts.push(start..last);
                start = last;
            }
            last = tensor;
        }
        parts.push(start..self.file_len);
        parts
    }

    /// Where `tensor`'s bytes lie in the file (checked inside it by [`GgufHeader::parse`]).
    pub fn tensor_range(&self, tensor: &TensorInfo) -> Range<usize> {
        let start = (self.data_offset + tensor.offset) as usize;
        start..start + tensor.byte_len() as usize
    }
}

impl<'a> GgufFile<'a> {
    /// Parses the header, metadata and tensor table, and checks that every tensor lies inside `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        Ok(Self { header: GgufHeader::parse(bytes, bytes.len() as u64)?, bytes: Source::Whole(bytes) })
    }

    /// Parses shared bytes (one part, or several split where tensors begin: a tensor that crosses
    /// parts is `Corrupt`): as [`GgufFile::parse`], and [`GgufFile::shared_tensor_bytes`] then
    /// gives each tensor's bytes where they lie.
    pub fn parse_shared(bytes: &'a SharedBytes) -> Result<Self, GgufError> {
        let header = GgufHeader::parse(bytes.first_part(), bytes.len() as u64)?;
        if let Some(tensor) = header.tensors.iter().find(|t| !bytes.holds_whole(header.tensor_range(t))) {
            return Err(GgufError::Corrupt(format!("tensor '{}' crosses the parts the file is held in", tensor.name)));
        }
        Ok(Self { header, bytes: Source::Shared(bytes) })
    }

    /// The header alone (metadata and tensor table).
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The raw (possibly quantized) bytes of a tensor.
    pub fn tensor_bytes(&self, tensor: &TensorInfo) -> &'a [u8] {
        let range = self.tensor_range(tensor);
        match self.bytes {
            Source::Whole(bytes) => &bytes[range],
            Source::Shared(bytes) => bytes.get(range),
        }
    }

    /// A tensor's bytes, shared: where they lie in the file when it was parsed shared, else a
    /// copy.
    pub fn shared_tensor_bytes(&self, tensor: &TensorInfo) -> SharedSlice {
        match self.bytes {
            Source::Shared(shared) => shared.slice(self.tensor_range(tensor)),
            Source::Whole(bytes) => SharedSlice::copy_of(&bytes[self.tensor_range(tensor)]),
        }
    }

    /// The tensor called `name`, dequantized to f32 in file order (`dims[0]` fastest).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, GgufError> {
        let tensor = self.tensor(name).ok_or_else(|| GgufError::MissingTensor(name.to_string()))?;
        dequantize(tensor.ggml_type, self.tensor_bytes(tensor), tensor.element_count() as usize)
            .ok_or_else(|| GgufError::UnsupportedDequantization { name: name.to_string(), ggml_type: tensor.ggml_type })
    }
}

/// A bounds-checked little-endian cursor over a file's first bytes (or all of them).
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Bytes of the whole file, which counts are checked against.
    file_len: u64,
}

/// Arrays nest; real files use one level. Deeper nesting is taken as corruption.
const MAX_ARRAY_NESTING: u32 = 4;

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        let end = (self.pos as u64).checked_add(n).filter(|&end| end <= self.bytes.len() as u64);
        match end {
            Some(end) => {
                let slice = &self.bytes[self.pos..end as usize];
                self.pos = end as usize;
                Ok(slice)
            }
            None => Err(GgufError::Truncated {
                what: what.to_string(),
                needed: (self.pos as u64).saturating_add(n),
                len: self.bytes.len() as u64,
            }),
        }
    }

    /// `count` items of at least `min_bytes_each`, or as many as the bytes at hand can hold.
    fn at_most(&self, count: u64, min_bytes_each: u64) -> usize {
        let present = (self.bytes.len() - self.pos) as u64 / min_bytes_each;
        count.min(present) as usize
    }

    fn check_count(&self, count: u64, min_bytes_each: u64, what: &str) -> Result<(), GgufError> {
        let remaining = self.file_len.saturating_sub(self.pos as u64);
        if count.saturating_mul(min_bytes_each) > remaining {
            return Err(GgufError::Corrupt(format!("{what} {count} cannot fit in the {remaining} bytes that follow")));
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        Ok(self.take(N as u64, what)?.try_into().expect("length checked"))
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| GgufError::Corrupt(format!("{what} is not valid UTF-8")))
    }

    fn value(&mut self, value_type: u32, key: &str, depth: u32) -> Result<MetadataValue, GgufError> {
        let what = || format!("metadata '{key}'");
        Ok(match value_type {
            0 => MetadataValue::U8(u8::from_le_bytes(self.array(&what())?)),
            1 => MetadataValue::I8(i8::from_le_bytes(self.array(&what())?)),
            2 => MetadataValue::U16(u16::from_le_bytes(self.array(&what())?)),
            3 => MetadataValue::I16(i16::from_le_bytes(self.array(&what())?)),
            4 => MetadataValue::U32(u32::from_le_bytes(self.array(&what())?)),
            5 => MetadataValue::I32(i32::from_le_bytes(self.array(&what())?)),
            6 => MetadataValue::F32(f32::from_le_bytes(self.array(&what())?)),
            7 => match self.array::<1>(&what())?[0] {
                0 => MetadataValue::Bool(false),
                1 => MetadataValue::Bool(true),
                other => return Err(GgufError::Corrupt(format!("metadata '{key}' holds bool value {other}"))),
            },
            8 => MetadataValue::String(self.string(&what())?),
            9 => {
                if depth >= MAX_ARRAY_NESTING {
                    return Err(GgufError::Corrupt(format!("metadata '{key}' nests arrays too deeply")));
                }
                let item_type = self.u32(&what())?;
                let len = self.u64(&what())?;
                self.check_count(len, 1, &format!("length of array '{key}'"))?;
                let mut items = Vec::with_capacity(self.at_most(len, 1));
                for _ in 0..len {
                    items.push(self.value(item_type, key, depth + 1)?);
                }
                MetadataValue::Array(items)
            }
            10 => MetadataValue::U64(u64::from_le_bytes(self.array(&what())?)),
            11 => MetadataValue::I64(i64::from_le_bytes(self.array(&what())?)),
            12 => MetadataValue::F64(f64::from_le_bytes(self.array(&what())?)),
            other => return Err(GgufError::Corrupt(format!("metadata '{key}' has unknown value type {other}"))),
        })
    }
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
