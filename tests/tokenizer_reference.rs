//! The tokenizer built from the GGUF gives llama.cpp's ids on every reference string.

use nucleus_gguf::GgufFile;
use nucleus_tests::{model_bytes, reference};
use nucleus_tokenizer::{ChatMessage, Tokenizer};

fn tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::parse(model_bytes()).unwrap()).unwrap()
}

#[test]
fn ids_match_llama_cpp_on_every_reference_string() {
    let tokenizer = tokenizer();
    let reference = reference();
    let mut failures = Vec::new();
    for case in reference
        .tokenizer_cases
        .iter()
        .map(|c| (&c.text, &c.ids))
        .chain(reference.logit_cases.values().map(|c| (&c.text, &c.ids)))
    {
        let ids = tokenizer.encode(case.0).unwrap();
        if &ids != case.1 {
            failures.push(format!("{:?}\n  ours:      {ids:?}\n  reference: {:?}", case.0, case.1));
        }
    }
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
