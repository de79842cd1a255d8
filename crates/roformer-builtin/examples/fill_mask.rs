//! Fill the masks of a text with the built-in poetry model, in a few lines.
//!
//! `cargo run -p roformer-builtin --example fill_mask -- "举头望明[MASK]，低头思故乡。"`

use roformer::Precision;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "举头望明[MASK]，低头思故乡。".into());
    let lm = roformer_builtin::poetry::masked_lm(Precision::F32)?;
    for (i, mask) in lm.fill_mask(&text, 5)?.iter().enumerate() {
        println!("mask {} (token {}):", i + 1, mask.position);
        for p in &mask.predictions {
            let sequence = p.sequence.as_deref().unwrap_or("-");
            println!("  {:.3}  {sequence}", p.probability);
        }
    }
    Ok(())
}
