//! Tests on hand-made blocks and hand-made files.

use super::*;
use half::{bf16, f16};

/// Writes a GGUF v3 file: metadata and tensors given as (name, dims, type id, raw bytes).
pub(crate) struct GgufWriter {
    metadata: Vec<u8>,
    metadata_count: u64,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

impl GgufWriter {
    pub(crate) fn new() -> Self {
        Self { metadata: Vec::new(), metadata_count: 0, tensors: Vec::new() }
    }

    fn key(&mut self, key: &str, value_type: u32) {
        push_string(&mut self.metadata, key);
        self.metadata.extend_from_slice(&value_type.to_le_bytes());
        self.metadata_count += 1;
    }

    pub(crate) fn u32(mut self, key: &str, v: u32) -> Self {
        self.key(key, 4);
        self.metadata.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn f32(mut self, key: &str, v: f32) -> Self {
        self.key(key, 6);
        self.metadata.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn string(mut self, key: &str, v: &str) -> Self {
        self.key(key, 8);
        push_string(&mut self.metadata, v);
        self
    }

    pub(crate) fn strings(mut self, key: &str, items: &[&str]) -> Self {
        self.key(key, 9);
        self.metadata.extend_from_slice(&8u32.to_le_bytes());
        self.metadata.extend_from_slice(&(items.len() as u64).to_le_bytes());
        for item in items {
            push_string(&mut self.metadata, item);
        }
        self
    }

    pub(crate) fn tensor(mut self, name: &str, dims: &[u64], type_id: u32, bytes: Vec<u8>) -> Self {
        self.tensors.push((name.to_string(), dims.to_vec(), type_id, bytes));
        self
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.metadata_count.to_le_bytes());
        out.extend_from_slice(&self.metadata);
        let mut offset = 0u64;
        for (name, dims, type_id, bytes) in &self.tensors {
            push_string(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&type_id.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset += (bytes.len() as u64).div_ceil(32) * 32;
        }
        out.resize(out.len().div_ceil(32) * 32, 0);
        for (i, (_, _, _, bytes)) in self.tensors.iter().enumerate() {
            if i > 0 {
                out.resize(out.len().div_ceil(32) * 32, 0);
            }
            out.extend_from_slice(bytes);
        }
        out
    }
}

fn push_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn small_file() -> Vec<u8> {
    GgufWriter::new()
        .string("general.architecture", "llama")
        .u32("llama.block_count", 2)
        .f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .strings("tokenizer.ggml.tokens", &["a", "b", "c"])
        .tensor("weights", &[4, 2], 0, f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]))
        .tensor("norm", &[3], 0, f32_bytes(&[0.5, -0.5, 0.25]))
        .finish()
}

#[test]
fn parses_metadata_and_tensors() {
    let bytes = small_file();
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(file.get_u64("llama.block_count").unwrap(), 2);
    assert!((file.get_f64("llama.attention.layer_norm_rms_epsilon").unwrap() - 1e-5).abs() < 1e-12);
    assert_eq!(file.get_string_array("tokenizer.ggml.tokens").unwrap(), vec!["a", "b", "c"]);
    let weights = file.tensor("weights").unwrap();
    assert_eq!(weights.matrix_shape(), (2, 4));
    assert_eq!(file.dequantize("weights").unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(file.dequantize("norm").unwrap(), vec![0.5, -0.5, 0.25]);
    assert_eq!(file.data_offset % 32, 0);
}

#[test]
fn metadata_errors_name_the_key() {
    let bytes = small_file();
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.get_u64("llama.context_length"), Err(GgufError::MissingKey("llama.context_length".into())));
    let err = file.get_u64("general.architecture").unwrap_err();
    assert_eq!(err.to_string(), "metadata key 'general.architecture' has type string, expected unsigned integer");
    assert_eq!(file.dequantize("nope"), Err(GgufError::MissingTensor("nope".into())));
}

#[test]
fn rejects_bad_magic() {
    let mut bytes = small_file();
    bytes[..4].copy_from_slice(b"GGML");
    let err = GgufFile::parse(&bytes).unwrap_err();
    assert_eq!(err, GgufError::BadMagic(*b"GGML"));
    assert!(err.to_string().starts_with("not a GGUF file"));
    assert!(matches!(GgufFile::parse(b"GG"), Err(GgufError::Truncated { .. })));
    assert!(matches!(GgufFile::parse(b""), Err(GgufError::Truncated { .. })));
}

#[test]
fn rejects_unsupported_version() {
    let mut bytes = small_file();
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(GgufFile::parse(&bytes).unwrap_err(), GgufError::UnsupportedVersion(1));
}

#[test]
fn truncated_file_names_the_tensor_past_the_end() {
    let bytes = small_file();
    let cut = &bytes[..bytes.len() - 4];
    match GgufFile::parse(cut).unwrap_err() {
        GgufError::Truncated { what, needed, len } => {
            assert_eq!(what, "tensor 'norm'");
            assert!(needed > len);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn every_truncation_of_the_header_is_an_error_not_a_panic() {
    let bytes = small_file();
    let file = GgufFile::parse(&bytes).unwrap();
    for len in 0..file.data_offset as usize {
        assert!(GgufFile::parse(&bytes[..len]).is_err(), "prefix of {len} bytes parsed");
    }
}

#[test]
fn corrupt_counts_do_not_allocate() {
    let mut bytes = small_file();
    bytes[16..24].copy_from_slice(&u64::MAX.to_le_bytes()); // metadata count
    assert!(matches!(GgufFile::parse(&bytes), Err(GgufError::Corrupt(_))));
}

#[test]
fn unknown_tensor_type_is_named() {
    let bytes = GgufWriter::new().tensor("odd", &[4], 99, vec![0; 16]).finish();
    assert_eq!(GgufFile::parse(&bytes).unwrap_err(), GgufError::UnknownTensorType(99, "odd".into()));
}

#[test]
fn known_but_unsupported_type_parses_and_refuses_to_dequantize() {
    // IQ4_XS: 256 elements in 136 bytes.
    let bytes = GgufWriter::new().tensor("iq4", &[256], 23, vec![0; 136]).finish();
    let file = GgufFile::parse(&bytes).unwrap();
    let err = file.dequantize("iq4").unwrap_err();
    assert_eq!(err.to_string(), "tensor 'iq4' has type IQ4_XS, which this build cannot dequantize");
}

#[test]
fn f16_and_bf16() {
    let values = [1.5f32, -2.25, 65504.0, 0.0];
    let f16s: Vec<u8> = values.iter().flat_map(|&v| f16_bytes(v)).collect();
    assert_eq!(dequantize(GgmlType::F16, &f16s, 4).unwrap(), values);
    let bf16s: Vec<u8> = values[..2].iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect();
    assert_eq!(dequantize(GgmlType::Bf16, &bf16s, 2).unwrap(), values[..2]);
}

#[test]
fn q8_0_block() {
    let mut block = f16_bytes(0.5).to_vec();
    block.extend((0..32).map(|i| (i as i8 - 16) as u8));
    let expected: Vec<f32> = (0..32).map(|i| (i - 16) as f32 * 0.5).collect();
    assert_eq!(dequantize(GgmlType::Q8_0, &block, 32).unwrap(), expected);
}

/// Packs 32 4-bit values: element j in the low nibble of byte j, element j+16 in the high nibble.
fn pack_nibbles_32(q: &[u8; 32]) -> Vec<u8> {
    (0..16).map(|j| q[j] | (q[j + 16] << 4)).collect()
}

#[test]
fn q4_0_block() {
    let q: [u8; 32] = std::array::from_fn(|i| (i * 7 % 16) as u8);
    let mut block = f16_bytes(0.25).to_vec();
    block.extend(pack_nibbles_32(&q));
    let expected: Vec<f32> = q.iter().map(|&v| (v as f32 - 8.0) * 0.25).collect();
    assert_eq!(dequantize(GgmlType::Q4_0, &block, 32).unwrap(), expected);
}

#[test]
fn q4_1_block() {
    let q: [u8; 32] = std::array::from_fn(|i| (15 - i % 16) as u8);
    let mut block = f16_bytes(0.125).to_vec();
    block.extend(f16_bytes(-1.0));
    block.extend(pack_nibbles_32(&q));
    let expected: Vec<f32> = q.iter().map(|&v| v as f32 * 0.125 - 1.0).collect();
    assert_eq!(dequantize(GgmlType::Q4_1, &block, 32).unwrap(), expected);
    // Two blocks in a row keep their own scales.
    let mut two = block.clone();
    two[0..2].copy_from_slice(&f16_bytes(1.0));
    two.extend(&block);
    let out = dequantize(GgmlType::Q4_1, &two, 64).unwrap();
    assert_eq!(out[0], q[0] as f32 - 1.0);
    assert_eq!(&out[32..], &expected[..]);
}

/// Packs eight 6-bit scales and eight 6-bit mins into Q4_K's 12 bytes.
fn pack_q4_k_scales(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4);
    }
    s
}

#[test]
fn q4_k_block() {
    let sc: [u8; 8] = [1, 2, 17, 63, 33, 48, 5, 60];
    let mn: [u8; 8] = [0, 63, 31, 16, 47, 2, 59, 9];
    let (d, dmin) = (0.5f32, 0.25f32);
    let q: [u8; 256] = std::array::from_fn(|e| ((e * 5 + e / 7) % 16) as u8);
    let mut block = f16_bytes(d).to_vec();
    block.extend(f16_bytes(dmin));
    block.extend(pack_q4_k_scales(&sc, &mn));
    // Groups of 64: elements 0..32 in low nibbles of 32 bytes, 32..64 in the high nibbles.
    for group in 0..4 {
        for l in 0..32 {
            block.push(q[64 * group + l] | (q[64 * group + 32 + l] << 4));
        }
    }
    assert_eq!(block.len(), 144);
    let out = dequantize(GgmlType::Q4K, &block, 256).unwrap();
    for e in 0..256 {
        let sub = e / 32;
        let expected = d * sc[sub] as f32 * q[e] as f32 - dmin * mn[sub] as f32;
        assert_eq!(out[e], expected, "element {e}");
    }
}

#[test]
fn q6_k_block() {
    let scales: [i8; 16] = [1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 127, -128];
    let d = 0.125f32;
    let q: [u8; 256] = std::array::from_fn(|e| ((e * 13 + 3) % 64) as u8);
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    let mut scale_of = [0usize; 256];
    for e in 0..256 {
        let (half, r) = (e / 128, e % 128);
        let (quarter, l) = (r / 32, r % 32);
        let ql_byte = 64 * half + l + 32 * (quarter % 2);
        ql[ql_byte] |= (q[e] & 15) << (4 * (quarter / 2));
        qh[32 * half + l] |= (q[e] >> 4) << (2 * quarter);
        scale_of[e] = 8 * half + l / 16 + 2 * quarter;
    }
    let mut block = ql.to_vec();
    block.extend(qh);
    block.extend(scales.iter().map(|&s| s as u8));
    block.extend(f16_bytes(d));
    assert_eq!(block.len(), 210);
    let out = dequantize(GgmlType::Q6K, &block, 256).unwrap();
    for e in 0..256 {
        let expected = d * scales[scale_of[e]] as f32 * (q[e] as i32 - 32) as f32;
        assert_eq!(out[e], expected, "element {e}");
    }
    // Element 0 uses scale 0, element 16 scale 1, element 32 scale 2, element 128 scale 8.
    assert_eq!((scale_of[0], scale_of[16], scale_of[32], scale_of[128]), (0, 1, 2, 8));
}

/// Q5_0/Q5_1's 16 nibble bytes and 32 high bits of 32 5-bit values.
fn pack_q5_32(q: &[u8; 32]) -> ([u8; 4], Vec<u8>) {
    let qh: u32 = (0..32).map(|j| u32::from(q[j] >> 4) << j).sum();
    let low: [u8; 32] = std::array::from_fn(|j| q[j] & 15);
    (qh.to_le_bytes(), pack_nibbles_32(&low))
}

#[test]
fn q5_0_and_q5_1_blocks() {
    let q: [u8; 32] = std::array::from_fn(|i| (i * 11 % 32) as u8);
    let (qh, qs) = pack_q5_32(&q);
    let mut q5_0 = f16_bytes(0.25).to_vec();
    q5_0.extend(qh);
    q5_0.extend(&qs);
    assert_eq!(q5_0.len(), 22);
    let expected: Vec<f32> = q.iter().map(|&v| (v as f32 - 16.0) * 0.25).collect();
    assert_eq!(dequantize(GgmlType::Q5_0, &q5_0, 32).unwrap(), expected);

    let mut q5_1 = f16_bytes(0.5).to_vec();
    q5_1.extend(f16_bytes(-2.0));
    q5_1.extend(qh);
    q5_1.extend(&qs);
    assert_eq!(q5_1.len(), 24);
    let expected: Vec<f32> = q.iter().map(|&v| v as f32 * 0.5 - 2.0).collect();
    assert_eq!(dequantize(GgmlType::Q5_1, &q5_1, 32).unwrap(), expected);
}

#[test]
fn q5_k_block() {
    let sc: [u8; 8] = [3, 62, 17, 8, 33, 48, 1, 60];
    let mn: [u8; 8] = [9, 0, 31, 63, 47, 2, 59, 16];
    let (d, dmin) = (0.25f32, 0.5f32);
    let q: [u8; 256] = std::array::from_fn(|e| ((e * 7 + e / 5) % 32) as u8);
    let mut block = f16_bytes(d).to_vec();
    block.extend(f16_bytes(dmin));
    block.extend(pack_q4_k_scales(&sc, &mn));
    // qh[l]: bit 2g for element 64g + l, bit 2g + 1 for element 64g + 32 + l.
    let qh: Vec<u8> = (0..32)
        .map(|l| (0..4).map(|g| ((q[64 * g + l] >> 4) << (2 * g)) | ((q[64 * g + 32 + l] >> 4) << (2 * g + 1))).sum())
        .collect();
    block.extend(qh);
    for group in 0..4 {
        for l in 0..32 {
            block.push((q[64 * group + l] & 15) | ((q[64 * group + 32 + l] & 15) << 4));
        }
    }
    assert_eq!(block.len(), 176);
    let out = dequantize(GgmlType::Q5K, &block, 256).unwrap();
    for e in 0..256 {
        let sub = e / 32;
        let expected = d * sc[sub] as f32 * q[e] as f32 - dmin * mn[sub] as f32;
        assert_eq!(out[e], expected, "element {e}");
    }
}

/// A file of four f32 tensors of 64, 8, 40 and 16 values (256, 32, 160 and 64 bytes).
fn four_tensor_file() -> Vec<u8> {
    let values = |n: usize, base: f32| f32_bytes(&(0..n).map(|i| base + i as f32).collect::<Vec<_>>());
    GgufWriter::new()
        .string("general.architecture", "llama")
        .tensor("a", &[64], 0, values(64, 0.0))
        .tensor("b", &[8], 0, values(8, 100.0))
        .tensor("c", &[40], 0, values(40, 200.0))
        .tensor("d", &[16], 0, values(16, 300.0))
        .finish()
}

#[test]
fn a_file_held_in_parts_split_where_tensors_begin_reads_as_the_whole_file() {
    let bytes = four_tensor_file();
    let whole = GgufFile::parse(&bytes).unwrap();
    let start = |name: &str| whole.tensor_range(whole.tensor(name).unwrap()).start as u64;
    let len = bytes.len() as u64;
    // At most 200 bytes a part: the header; `a` (256 bytes) alone; `b` and `c` (192); `d`.
    let parts = whole.parts(200);
    assert_eq!(parts, vec![0..start("a"), start("a")..start("b"), start("b")..start("d"), start("d")..len]);
    // With parts of 1 byte each tensor is a part; one part holds everything when it can.
    assert_eq!(whole.parts(1).len(), 5);
    assert_eq!(whole.parts(len), vec![0..len]);

    let split =
        SharedBytes::from_parts(parts.iter().map(|r| bytes[r.start as usize..r.end as usize].to_vec()).collect());
    let shared = GgufFile::parse_shared(&split).unwrap();
    for tensor in &whole.tensors {
        assert_eq!(shared.tensor_bytes(tensor), whole.tensor_bytes(tensor), "{}", tensor.name);
        assert_eq!(&*shared.shared_tensor_bytes(tensor), whole.tensor_bytes(tensor));
        assert!(!shared.shared_tensor_bytes(tensor).is_copy());
        assert_eq!(shared.dequantize(&tensor.name).unwrap(), whole.dequantize(&tensor.name).unwrap());
    }
    // Split inside a tensor, the file is refused by name, not read across parts.
    let mid = start("c") as usize + 8;
    let bad = SharedBytes::from_parts(vec![bytes[..mid].to_vec(), bytes[mid..].to_vec()]);
    assert_eq!(
        GgufFile::parse_shared(&bad).unwrap_err(),
        GgufError::Corrupt("tensor 'c' crosses the parts the file is held in".into())
    );
}

/// Reads `bytes` through a stream of the tensors `wanted` names (`pieces`: given in pieces, else
/// whole), in chunks of `chunk` bytes: each tensor, by name, with its bytes joined from its
/// pieces (which must come in order, the last marked).
fn streamed(bytes: &[u8], wanted: &[&str], pieces: &[&str], chunk: usize) -> Vec<(String, Vec<u8>)> {
    let header = GgufHeader::parse(bytes, bytes.len() as u64).unwrap();
    let how = |t: &TensorInfo| match t.name.as_str() {
        name if pieces.contains(&name) => Wanted::InPieces,
        name if wanted.contains(&name) => Wanted::Whole,
        _ => Wanted::No,
    };
    let mut stream = TensorStream::new(&header, how).unwrap();
    let mut given: Vec<(String, Vec<u8>)> = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, bytes) in bytes.chunks(chunk).enumerate() {
        stream
            .read((i * chunk) as u64, bytes, |piece| {
                let (index, mut joined) = open.take().unwrap_or((piece.index, Vec::new()));
                assert_eq!((index, piece.at), (piece.index, joined.len() as u64), "pieces in order");
                assert!(!piece.bytes.is_empty());
                let whole = how(&header.tensors[index]) == Wanted::Whole;
                assert!(!whole || (piece.at == 0 && piece.last), "a whole tensor comes in one piece");
                joined.extend_from_slice(piece.bytes);
                if piece.last {
                    given.push((header.tensors[index].name.clone(), joined));
                } else {
                    open = Some((index, joined));
                }
                Ok::<_, GgufError>(())
            })
            .unwrap();
    }
    assert!(stream.done() && stream.position() == bytes.len() as u64 && open.is_none());
    given
}

#[test]
fn a_stream_gives_each_wanted_tensor_whole_or_in_pieces_in_file_order_whatever_the_chunks() {
    let bytes = four_tensor_file();
    let whole = GgufFile::parse(&bytes).unwrap();
    let expected: Vec<(String, Vec<u8>)> = ["a", "c", "d"]
        .iter()
        .map(|name| (name.to_string(), whole.tensor_bytes(whole.tensor(name).unwrap()).to_vec()))
        .collect();
    for chunk in [1, 7, 32, 100, 161, bytes.len()] {
        assert_eq!(streamed(&bytes, &["d", "a", "c"], &[], chunk), expected, "chunks of {chunk} bytes");
        assert_eq!(
            streamed(&bytes, &["d"], &["a", "c"], chunk),
            expected,
            "chunks of {chunk} bytes, a and c in pieces"
        );
    }
    let header = GgufHeader::parse(&bytes, bytes.len() as u64).unwrap();
    let stream = TensorStream::new(&header, |_| Wanted::Whole).unwrap();
    assert_eq!(stream.staging_bytes(), 256, "the largest tensor, `a`");
    let in_pieces =
        TensorStream::new(&header, |t| if t.name == "a" { Wanted::InPieces } else { Wanted::Whole }).unwrap();
    assert!(in_pieces.staging_bytes() < 256, "a tensor given in pieces is not staged");
}

#[test]
fn a_stream_skips_bytes_read_again_and_refuses_a_gap() {
    let bytes = four_tensor_file();
    let header = GgufHeader::parse(&bytes, bytes.len() as u64).unwrap();
    let mut stream = TensorStream::new(&header, |_| Wanted::Whole).unwrap();
    let mut given = Vec::new();
    let mut take = |piece: Piece<'_>| {
        given.push(piece.index);
        Ok::<_, GgufError>(())
    };
    let b_end = header.tensor_range(header.tensor("b").unwrap()).end;
    stream.read(0, &bytes[..b_end + 10], &mut take).unwrap();
    // A download that starts again from its first byte: what was read is not given again.
    stream.read(0, &bytes[..100], &mut take).unwrap();
    stream.read(100, &bytes[100..], &mut take).unwrap();
    assert_eq!(given, vec![0, 1, 2, 3]);
    let mut fresh = TensorStream::new(&header, |_| Wanted::Whole).unwrap();
    let gap = fresh.read(10, &bytes[10..20], |_| Ok::<_, GgufError>(())).unwrap_err();
    assert_eq!(gap, GgufError::Corrupt("bytes from 10 came before those from 0 (the file is read in order)".into()));
}

#[test]
fn a_stream_refuses_overlapping_tensors_and_passes_on_what_its_reader_refuses() {
    let bytes = four_tensor_file();
    let mut header = GgufHeader::parse(&bytes, bytes.len() as u64).unwrap();
    let mut stream = TensorStream::new(&header, |_| Wanted::Whole).unwrap();
    let refused = stream
        .read(0, &bytes, |piece| if piece.index == 1 { Err(GgufError::MissingTensor("b".into())) } else { Ok(()) });
    assert_eq!(refused.unwrap_err(), GgufError::MissingTensor("b".into()));
    header.tensors[2].offset = header.tensors[1].offset + 4;
    assert_eq!(
        TensorStream::new(&header, |_| Wanted::Whole).unwrap_err(),
        GgufError::Corrupt("tensors 'b' and 'c' overlap".into())
    );
}
