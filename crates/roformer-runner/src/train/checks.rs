//! Checks of a training run's options and state that need no model: numeric flags (refused at
//! the flag, so that a NaN never reaches `run.json`), the loss plot's name, the label list,
//! and the vocabulary against the config (the step a resumed checkpoint records is checked in
//! `roformer::train::resume`).

use std::path::{Component, Path};

use anyhow::bail;

/// `--lr`: a finite number above 0.
///
/// # Errors
/// Anything else, as a message clap prints after the flag.
pub fn parse_lr(s: &str) -> Result<f64, String> {
    parse_with(s, "a finite number above 0", |x| x > 0.0)
}

/// `--weight-decay`: a finite number, 0 or more.
///
/// # Errors
/// Anything else, as a message clap prints after the flag.
pub fn parse_weight_decay(s: &str) -> Result<f64, String> {
    parse_with(s, "a finite number, 0 or more (0: no decay)", |x| x >= 0.0)
}

/// `--max-grad-norm`: a finite number, 0 or more (0: no clipping).
///
/// # Errors
/// Anything else, as a message clap prints after the flag.
pub fn parse_max_grad_norm(s: &str) -> Result<f64, String> {
    parse_with(s, "a finite number, 0 or more (0: no clipping)", |x| {
        x >= 0.0
    })
}

/// `s` as a finite number that passes `ok`; else "must be RULE, got S".
fn parse_with(s: &str, rule: &str, ok: fn(f64) -> bool) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && ok(x) => Ok(x),
        _ => Err(format!("must be {rule}, got {s}")),
    }
}

/// A flag's value parser.
type FlagParser = fn(&str) -> Result<f64, String>;

/// The numeric options of a run again, as [`parse_lr`] and the others check them at the flag:
/// for arguments read back from `run.json` by `--resume`.
///
/// # Errors
/// The first bad value, named by its flag.
pub fn check_numbers(lr: f64, weight_decay: f64, max_grad_norm: f64) -> anyhow::Result<()> {
    let checks: [(&str, f64, FlagParser); 3] = [
        ("--lr", lr, parse_lr),
        ("--weight-decay", weight_decay, parse_weight_decay),
        ("--max-grad-norm", max_grad_norm, parse_max_grad_norm),
    ];
    for (flag, value, parse) in checks {
        if let Err(e) = parse(&value.to_string()) {
            bail!("{flag} {e}");
        }
    }
    Ok(())
}

/// `--plot`: a file name in `--out` ending in `.png` or `.svg`; a path with a directory part
/// (absolute, `..`, `sub/x.png`) is refused, so that the plot never lands outside `--out`.
///
/// # Errors
/// Any other path.
pub fn check_plot_name(plot: &Path) -> anyhow::Result<()> {
    let plain = matches!(
        plot.components().collect::<Vec<_>>()[..],
        [Component::Normal(_)]
    );
    if !plain {
        bail!(
            "--plot {}: give a file name, without a directory: the plot is written in --out",
            plot.display()
        );
    }
    let extension = plot.extension().and_then(|e| e.to_str());
    if !matches!(extension, Some("png" | "svg")) {
        bail!(
            "--plot {}: the name must end in .png or .svg",
            plot.display()
        );
    }
    Ok(())
}

/// `--labels`: each label once, none empty.
///
/// # Errors
/// A label given twice or an empty one.
pub fn check_labels(labels: &[String]) -> anyhow::Result<()> {
    // A set, not a scan of the labels before each: 10 000 labels are 10 000 look-ups.
    let mut seen = std::collections::HashSet::with_capacity(labels.len());
    for (i, label) in labels.iter().enumerate() {
        if label.trim().is_empty() {
            bail!(
                "--labels {}: label {} is empty; give names separated by commas",
                labels.join(","),
                i + 1
            );
        }
        if !seen.insert(label.as_str()) {
            bail!(
                "--labels {}: {label:?} is given twice; give each label once (its position is \
                 its class index)",
                labels.join(",")
            );
        }
    }
    Ok(())
}

/// Refuses a vocabulary larger than the config's `vocab_size`: its ids from `vocab_size` up
/// have no embedding row.
///
/// # Errors
/// "DIR/vocab.txt has N tokens, more than vocab_size M in DIR/config.json".
pub fn check_vocab_fits(dir: &Path, tokens: usize, vocab_size: usize) -> anyhow::Result<()> {
    if tokens > vocab_size {
        bail!(
            "{} has {tokens} tokens, more than vocab_size {vocab_size} in {}: ids {vocab_size} \
             and up have no embedding row; use the vocabulary the checkpoint was trained with",
            dir.join("vocab.txt").display(),
            dir.join("config.json").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_flags_refuse_nan_infinity_and_out_of_range_values() {
        assert_eq!(parse_max_grad_norm("0"), Ok(0.0));
        assert_eq!(parse_max_grad_norm("1.5"), Ok(1.5));
        for bad in ["-1", "NaN", "nan", "inf", "-inf", "x", ""] {
            let err = parse_max_grad_norm(bad).unwrap_err();
            assert!(
                err.contains(bad) && err.contains("0 or more"),
                "{bad}: {err}"
            );
        }
        assert_eq!(parse_lr("2e-3"), Ok(2e-3));
        assert!(parse_lr("0").is_err());
        assert!(parse_lr("NaN").is_err());
        assert_eq!(parse_weight_decay("0"), Ok(0.0));
        assert!(parse_weight_decay("-0.01").is_err());
        assert!(check_numbers(1e-3, 0.0, 0.0).is_ok());
        let err = check_numbers(1e-3, 0.0, -1.0).unwrap_err().to_string();
        assert!(err.starts_with("--max-grad-norm must be"), "{err}");
    }

    #[test]
    fn the_plot_is_a_png_or_svg_file_name_inside_out() {
        assert!(check_plot_name(Path::new("loss.png")).is_ok());
        assert!(check_plot_name(Path::new("loss.svg")).is_ok());
        for bad in [
            "../../x.png",
            "/tmp/x.png",
            "sub/x.png",
            "./x.png",
            "..",
            "x.pdf",
            "x",
        ] {
            assert!(check_plot_name(Path::new(bad)).is_err(), "{bad}");
        }
        let err = check_plot_name(Path::new("../../x.png")).unwrap_err();
        assert!(err.to_string().contains("without a directory"), "{err}");
    }

    #[test]
    fn labels_are_given_once_each() {
        let names = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
        assert!(check_labels(&names("pos,neg")).is_ok());
        let err = check_labels(&names("pos,pos,neg")).unwrap_err().to_string();
        assert!(err.contains("\"pos\" is given twice"), "{err}");
        assert!(check_labels(&names("pos,,neg")).is_err());
    }

    #[test]
    fn a_vocabulary_larger_than_the_config_is_refused_with_both_sizes() {
        assert!(check_vocab_fits(Path::new("ckpt"), 97, 97).is_ok());
        assert!(check_vocab_fits(Path::new("ckpt"), 90, 97).is_ok());
        let err = check_vocab_fits(Path::new("ckpt"), 98, 97)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("98 tokens") && err.contains("vocab_size 97"),
            "{err}"
        );
    }
}
