//! `headprint attention`: every head's attention pattern on a token sequence.

use headprint::backend::block_on;
use headprint::probes::attention_patterns;
use headprint::tokens::{parse_ids, with_bos};
use headprint::{Error, Result};
use serde_json::json;

use crate::commands::{BackendArgs, BosArg, Common, backend_line, print_note};
use crate::loaded::load;
use crate::print::{print_json_from, show};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Token ids, e.g. 3,1,4.
    #[arg(long, conflicts_with = "text")]
    tokens: Option<String>,
    /// Text, tokenized with the model's vocabulary.
    #[arg(long)]
    text: Option<String>,
    #[command(flatten)]
    bos: BosArg,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = load(&args.common.model)?;
    let ids = match (args.tokens, args.text) {
        (Some(ids), _) => parse_ids(&ids)?,
        (None, Some(text)) => loaded.opened.tokenizer.encode(&text)?,
        (None, None) => return Err(Error::BadTokens("give --tokens 3,1,4 or --text \"...\"".into())),
    };
    let model = loaded.model()?;
    let bos_token = loaded.bos(&model, &args.bos);
    let ids = with_bos(bos_token.as_ref().map(|b| b.id), &ids);
    let mut backend = args.backend.open()?;
    let computed = block_on(backend.with_fallback(async |backend| attention_patterns(&model, &ids, backend).await))?;
    let backend = backend.forward_info();
    print_note(&backend);
    // patterns[layer][head][query][key]
    let patterns: Vec<Vec<Vec<Vec<f32>>>> = computed
        .iter()
        .map(|heads| heads.iter().map(|p| p.row_iter().map(|r| r.iter().copied().collect()).collect()).collect())
        .collect();
    if args.common.json {
        return print_json_from(
            &json!({
                "tokens": ids,
                "prepend_bos": !args.bos.no_bos,
                "bos": bos_token,
                "backend": backend,
                "patterns": patterns,
            }),
            loaded.link.as_ref(),
        );
    }
    println!("{}", backend_line(&backend));
    let labels: Vec<String> = ids.iter().map(|&i| loaded.opened.tokenizer.token_text(i)).collect();
    for (layer, heads) in patterns.iter().enumerate() {
        for (head, rows) in heads.iter().enumerate() {
            println!("L{layer}H{head}: top key per query");
            for (q, row) in rows.iter().enumerate() {
                let k = (0..=q).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap_or(0);
                println!("  {q:>3} {:<8} -> {k:>3} {:<8} {:.4}", show(&labels[q]), show(&labels[k]), row[k]);
            }
        }
    }
    Ok(())
}
