//! The tokenizer built from the GGUF gives llama.cpp's ids on every reference string.

use nucleus_gguf::GgufFile;
use nucleus_tests::{GEMMA3, Reference, TINY_FAMILIES, TINY_QWEN35, gemma_bytes, model_bytes, reference, tiny_family};
use nucleus_tokenizer::{ChatMessage, Tokenizer};

fn tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::parse(model_bytes()).unwrap()).unwrap()
}

/// Every reference string and prompt `tokenizer` encodes otherwise than `reference`, described.
fn mismatches(tokenizer: &Tokenizer, reference: &Reference) -> Vec<String> {
    let strings = reference.tokenizer_cases.iter().map(|c| (&c.text, &c.ids));
    let prompts = reference.logit_cases.values().map(|c| (&c.text, &c.ids));
    strings
        .chain(prompts)
        .filter_map(|(text, expected)| {
            let ids = tokenizer.encode(text).unwrap();
            (&ids != expected).then(|| format!("{text:?}\n  ours:      {ids:?}\n  reference: {expected:?}"))
        })
        .collect()
}

#[test]
fn ids_match_llama_cpp_on_every_reference_string() {
    let reference = reference();
    let failures = mismatches(&tokenizer(), &reference);
    println!("tokenizer: {} reference strings checked", reference.tokenizer_cases.len() + reference.logit_cases.len());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn decoding_inverts_encoding() {
    let tokenizer = tokenizer();
    for case in reference().tokenizer_cases {
        assert_eq!(tokenizer.decode(&case.ids), case.text);
    }
}

#[test]
fn special_tokens_and_end_of_generation() {
    let tokenizer = tokenizer();
    assert_eq!(tokenizer.encode("<|im_start|>user").unwrap()[0], 1);
    assert!(!tokenizer.adds_bos());
    assert_eq!(tokenizer.end_of_generation_ids(), &[0, 2]);
    assert_eq!(tokenizer.token_text(7042), " Paris");
    assert!(tokenizer.is_control(2) && !tokenizer.is_control(7042));
}

#[test]
fn chat_template_renders_the_reference_chat_prompt() {
    let tokenizer = tokenizer();
    let chat = &reference().logit_cases["chat"];
    let rendered = tokenizer.render_chat(&[ChatMessage::user("What is 2+2?")]).unwrap();
    assert_eq!(rendered, chat.text);
    assert_eq!(tokenizer.encode(&rendered).unwrap(), chat.ids);
}

/// Gemma 3's SentencePiece vocabulary (262,144 tokens, merged by score, byte fallback, user-defined
/// whitespace and newline tokens, BOS first): the reference ids on every string and prompt, and
/// decoding back to the text.
#[test]
fn gemma_ids_match_the_reference_and_decode_back() {
    let tokenizer = Tokenizer::from_gguf(&GgufFile::parse(gemma_bytes()).unwrap()).unwrap();
    assert_eq!(tokenizer.model_name(), "llama");
    assert!(tokenizer.adds_bos() && tokenizer.bos_id() == Some(2));
    assert!(tokenizer.chat_template().is_none(), "Gemma 3 270M is a base model without a template");
    assert_eq!(tokenizer.end_of_generation_ids(), &[1, 106]);
    let reference = GEMMA3.reference();
    let failures = mismatches(&tokenizer, &reference);
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    for case in &reference.tokenizer_cases {
        assert_eq!(tokenizer.decode(&case.ids[1..]), case.text, "decoding {:?}", case.ids);
    }
}

/// The tiny families' byte-level BPE tokenizers with the `llama-bpe` (digits in threes, whole
/// vocabulary entries before merges, BOS added by default) and `qwen2` (single digits)
/// pre-tokenizers: the Hugging Face tokenizer's ids on every string and prompt, and their chat
/// templates rendering the reference's chat prompt.
#[test]
fn tiny_families_ids_match_hugging_face() {
    // Qwen3.5's real vocabulary, its pre-tokenizer (marks joined to letters), its user-defined
    // <think> tokens and its ChatML with a thinking block.
    for family in TINY_FAMILIES.into_iter().chain([TINY_QWEN35]) {
        let (bytes, reference) = tiny_family(family);
        let tokenizer = Tokenizer::from_gguf(&GgufFile::parse(&bytes).unwrap()).unwrap();
        let failures = mismatches(&tokenizer, &reference);
        assert!(failures.is_empty(), "{family}: {} mismatches:\n{}", failures.len(), failures.join("\n"));
        let chat = &reference.logit_cases["chat"];
        let rendered = tokenizer.render_chat(&[ChatMessage::user("What is 2+2?")]).unwrap();
        // Llama 3's template writes the BOS itself; encoding does not add a second.
        assert_eq!(rendered.trim_start_matches("<|begin_of_text|>"), chat.text, "{family}");
        assert_eq!(tokenizer.encode(&rendered).unwrap(), chat.ids, "{family}: the rendered chat's ids");
        println!(
            "{family}: {} strings, pre-tokenizer {}",
            reference.tokenizer_cases.len() + 3,
            tokenizer.pre_tokenizer_name()
        );
    }
}
