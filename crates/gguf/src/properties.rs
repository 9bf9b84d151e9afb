//! Property tests (proptest, coverage by random cases on stable Rust; see ARCHITECTURE.md for why
//! not cargo-fuzz): no input makes the reader panic, and a valid file of every tensor type
//! survives any corruption as a value or an error. The seed of the mutations is a hand-made file
//! with one tensor of each type; the real model's header is mutated in `tests/properties.rs`.

use proptest::prelude::*;

use super::tests::GgufWriter;
use super::*;

/// Every tensor type the reader knows, with its GGUF id.
fn known_types() -> Vec<(u32, GgmlType)> {
    (0..64).filter_map(|id| GgmlType::from_id(id).map(|t| (id, t))).collect()
}

/// A valid file with, for each known type, a tensor of `blocks` blocks (2 rows) of bytes from
/// `fill`; metadata of each kind the writer has.
fn every_type_file(fill: &[u8], blocks: u64) -> Vec<u8> {
    let mut writer = GgufWriter::new()
        .string("general.architecture", "llama")
        .u32("llama.block_count", 1)
        .f32("llama.rope.freq_base", 10_000.0)
        .strings("tokenizer.ggml.tokens", &["a", "b", "<s>"]);
    for (id, ggml_type) in known_types() {
        let (block, block_bytes) = ggml_type.block_layout();
        let bytes: Vec<u8> = fill.iter().copied().cycle().take((2 * blocks * block_bytes) as usize).collect();
        writer = writer.tensor(&format!("t.{ggml_type}"), &[blocks * block, 2], id, bytes);
    }
    writer.finish()
}

/// Parses `bytes` and, if it parses, dequantizes every tensor: each must be a value or an error.
fn read_everything(bytes: &[u8]) {
    if let Ok(file) = GgufFile::parse(bytes) {
        for tensor in &file.tensors {
            if let Ok(values) = file.dequantize(&tensor.name) {
                assert_eq!(values.len() as u64, tensor.element_count(), "{}", tensor.name);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_a_file_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        read_everything(&bytes);
        // Past the magic and version, so the counts, metadata and tensor table are exercised.
        let mut headed = b"GGUF\x03\0\0\0".to_vec();
        headed.extend_from_slice(&bytes);
        read_everything(&headed);
    }

    #[test]
    fn a_file_of_every_type_reads_whole_and_survives_any_corruption(
        fill in prop::collection::vec(any::<u8>(), 1..64),
        blocks in 1u64..3,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = every_type_file(&fill, blocks);
        let file = GgufFile::parse(&bytes).expect("the seed file parses");
        prop_assert_eq!(file.tensors.len(), known_types().len());
        for tensor in &file.tensors {
            // Every type reads, but for those known only by name, which are refused by name.
            match file.dequantize(&tensor.name) {
                Ok(values) => prop_assert_eq!(values.len() as u64, tensor.element_count()),
                Err(error) => prop_assert_eq!(
                    error,
                    GgufError::UnsupportedDequantization { name: tensor.name.clone(), ggml_type: tensor.ggml_type }
                ),
            }
        }
        prop_assert!(file.tensors.iter().filter(|t| file.dequantize(&t.name).is_ok()).count() >= 8);
        for (at, value) in flips {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        read_everything(&bytes);
    }

    #[test]
    fn every_type_dequantizes_any_blocks(blocks in 1usize..4, fill in prop::collection::vec(any::<u8>(), 1..256)) {
        for (_, ggml_type) in known_types() {
            let (block, block_bytes) = ggml_type.block_layout();
            let bytes: Vec<u8> = fill.iter().copied().cycle().take(blocks * block_bytes as usize).collect();
            if let Some(values) = dequantize(ggml_type, &bytes, blocks * block as usize) {
                prop_assert_eq!(values.len(), blocks * block as usize);
            }
        }
    }
}
