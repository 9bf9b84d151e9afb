//! Every block type against an independent dequantizer: random blocks (`fixtures/quant-blocks.json`,
//! made by `tests/tools/make_quant_blocks.py` with gguf-py, the Python package of llama.cpp's
//! repository) must give gguf-py's values bit for bit.

use nucleus_gguf::{GgmlType, dequantize};

#[test]
fn every_block_type_equals_gguf_py() {
    let text = include_str!("fixtures/quant-blocks.json");
    let fixture: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut types = Vec::new();
    for case in fixture["cases"].as_array().unwrap() {
        let name = case["type"].as_str().unwrap();
        let ggml_type = (0..64).filter_map(GgmlType::from_id).find(|t| t.name() == name).unwrap();
        let hex = case["bytes"].as_str().unwrap();
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let elements = case["elements"].as_u64().unwrap() as usize;
        let ours = dequantize(ggml_type, &bytes, elements).unwrap_or_else(|| panic!("{name} is not dequantized"));
        let expected: Vec<f32> =
            case["values"].as_array().unwrap().iter().map(|v| f32::from_bits(v.as_u64().unwrap() as u32)).collect();
        for (i, (a, b)) in ours.iter().zip(&expected).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{name} element {i}: ours {a}, gguf-py {b}");
        }
        types.push(name);
    }
    assert_eq!(types, ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]);
}
