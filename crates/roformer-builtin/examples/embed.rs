//! Embed texts with the built-in poetry model and rank them by cosine similarity to the first.
//!
//! `cargo run -p roformer-builtin --example embed -- 床前明月光 疑是地上霜 举头望明月 大漠孤烟直`

use roformer::pipeline::Pooling;
use roformer::Precision;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut texts: Vec<String> = std::env::args().skip(1).collect();
    if texts.len() < 2 {
        texts = ["床前明月光", "疑是地上霜", "举头望明月", "大漠孤烟直"]
            .map(String::from)
            .to_vec();
    }
    let lm = roformer_builtin::poetry::masked_lm(Precision::F32)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // Mean-pooled and L2-normalised: a dot product is the cosine.
    let vectors = lm.embed(&refs, Pooling::Mean)?;
    let cosine = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let mut ranked: Vec<(f32, &str)> = (1..texts.len())
        .map(|i| (cosine(&vectors[0], &vectors[i]), refs[i]))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("nearest to {}:", refs[0]);
    for (score, text) in ranked {
        println!("  {score:.4}  {text}");
    }
    Ok(())
}
