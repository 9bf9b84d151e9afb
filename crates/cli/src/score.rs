//! `nucleus score`: how surprising a text is to the model, token by token (GLTR's view in a
//! terminal): each token's rank and probability after the tokens before it, with the best
//! alternatives, then the text's log-likelihood and perplexity (or the whole report as JSON).

use std::io::Read;
use std::path::PathBuf;

use nucleus_engine::{DEFAULT_SCORE_TOP_K, Prompt, ScoreReport, ScoreRequest};
use nucleus_tokenizer::ChatMessage;

use crate::{DeviceArgs, ModelArg, load_engine};

#[derive(clap::Args)]
pub(crate) struct ScoreArgs {
    #[command(flatten)]
    model: ModelArg,
    /// The text to score, tokenized as is ("-": read it from standard input).
    #[arg(conflicts_with_all = ["file", "chat"], required_unless_present_any = ["file", "chat"])]
    text: Option<String>,
    /// Score the text of FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "chat")]
    file: Option<PathBuf>,
    /// Score a user message wrapped in the model's chat template (the template's tokens are
    /// scored too, marked as such).
    #[arg(long, value_name = "MESSAGE")]
    chat: Option<String>,
    /// Alternatives shown per token, 0..=20.
    #[arg(long, default_value_t = DEFAULT_SCORE_TOP_K)]
    top_k: usize,
    /// KV cache positions [default: the model's context length].
    #[arg(long)]
    context: Option<usize>,
    #[command(flatten)]
    device: DeviceArgs,
    /// The whole report as one JSON object.
    #[arg(long)]
    json: bool,
}

impl ScoreArgs {
    fn prompt(&self) -> Result<Prompt, String> {
        if let Some(message) = &self.chat {
            return Ok(Prompt::Chat(vec![ChatMessage::user(message.clone())]));
        }
        let text = match (&self.text, &self.file) {
            (Some(text), _) if text == "-" => {
                let mut text = String::new();
                std::io::stdin().read_to_string(&mut text).map_err(|e| format!("standard input: {e}"))?;
                text
            }
            (Some(text), _) => text.clone(),
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
            (None, None) => unreachable!("clap requires one"),
        };
        Ok(Prompt::Text(text))
    }
}

pub(crate) fn run(args: &ScoreArgs) -> Result<(), String> {
    let request = ScoreRequest { prompt: args.prompt()?, generated: Vec::new(), top_k: args.top_k };
    let (mut engine, _) = load_engine(&args.model, &args.device, args.context, None)?;
    let report = pollster::block_on(engine.score(&request)).map_err(|e| e.to_string())?;
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("a score report serializes"));
    } else {
        print!("{}", table(&report));
        let title = engine.info().title(Some(&args.model.path().to_string_lossy()));
        eprintln!("[{title} on {} | {}]", engine.model().device().describe(), summary(&report));
    }
    Ok(())
}

/// One line per token: position, rank, probability, the token (control tokens in brackets), and
/// the alternatives the model preferred.
fn table(report: &ScoreReport) -> String {
    let mut out = String::from("  pos     rank        p  token                 preferred\n");
    for (position, token) in report.tokens.iter().enumerate() {
        let shown = |text: &str, special: bool| {
            let text = format!("{text:?}");
            if special { format!("[{}]", &text[1..text.len() - 1]) } else { text }
        };
        let (rank, prob) = match (token.rank, token.prob) {
            (Some(rank), Some(prob)) => (rank.to_string(), format!("{prob:.4}")),
            _ => ("-".into(), "-".into()),
        };
        let preferred: Vec<String> = token
            .top
            .iter()
            .take_while(|candidate| candidate.id != token.id)
            .map(|candidate| format!("{} {:.3}", shown(&candidate.text, false), candidate.logprob.exp()))
            .collect();
        out += &format!(
            "{position:5} {rank:>8} {prob:>8}  {:<20}  {}\n",
            shown(&token.text, token.special),
            preferred.join(", ")
        );
    }
    out
}

fn summary(report: &ScoreReport) -> String {
    let perplexity = report.perplexity.map_or("-".into(), |p| format!("{p:.3}"));
    format!(
        "{} tokens, {} predicted | log-likelihood {:.3} nats, perplexity {perplexity} | {:.0} ms, {} bytes read back",
        report.tokens.len(),
        report.predicted_tokens,
        report.total_logprob,
        report.elapsed_ms,
        report.bytes_read
    )
}
