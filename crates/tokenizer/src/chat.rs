//! Chat templates: the GGUF's own Jinja `tokenizer.chat_template`, rendered with minijinja.

use minijinja::{Environment, Error, ErrorKind, context};
use serde::{Deserialize, Serialize};

use crate::TokenizerError;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    /// The roles a message may have.
    pub const ROLES: [&'static str; 3] = ["system", "user", "assistant"];

    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into() }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

const TEMPLATE_NAME: &str = "chat";

impl ChatTemplate {
    /// Compiles `source` (Hugging Face style: `messages`, `add_generation_prompt`, `bos_token`,
    /// `eos_token`, `raise_exception`, and Python string methods such as `.strip()`).
    pub fn new(source: &str, bos_token: String, eos_token: String) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| TokenizerError::Template(e.to_string()))?;
        Ok(Self { env, bos_token, eos_token })
    }

    /// The prompt text for `messages`; with `add_generation_prompt`, ending where the assistant speaks.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, TokenizerError> {
        if messages.is_empty() {
            return Err(TokenizerError::Template("a chat needs at least one message".into()));
        }
        let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| TokenizerError::Template(e.to_string()))?;
        let messages: Vec<minijinja::Value> =
            messages.iter().map(|m| context! { role => m.role.as_str(), content => m.content.as_str() }).collect();
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token.as_str(),
                eos_token => self.eos_token.as_str(),
            })
            .map_err(|e| TokenizerError::Template(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn renders_smollm2_template_with_default_system_prompt() {
        let template = ChatTemplate::new(SMOLLM2, String::new(), String::new()).unwrap();
        let text = template.render(&[ChatMessage::user("What is 2+2?")], true).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_system =
            template.render(&[ChatMessage::new("system", "Be brief."), ChatMessage::user("Hi")], false).unwrap();
        assert_eq!(with_system, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    }

    #[test]
    fn python_methods_and_raise_exception() {
        let source = "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be the user') }}{% endif %}{{ bos_token }}{{ messages[0].content.strip() }}";
        let template = ChatTemplate::new(source, "<s>".into(), "</s>".into()).unwrap();
        assert_eq!(template.render(&[ChatMessage::user("  hi  ")], true).unwrap(), "<s>hi");
        let err = template.render(&[ChatMessage::new("assistant", "x")], true).unwrap_err();
        assert!(err.to_string().contains("first message must be the user"), "{err}");
    }

    #[test]
    fn broken_template_is_an_error() {
        assert!(ChatTemplate::new("{% for x in %}", String::new(), String::new()).is_err());
    }
}
