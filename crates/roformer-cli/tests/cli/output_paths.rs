//! Where output files go: a symbolic link is followed (the link stays), a FIFO or a device is
//! written as a stream, `-` is standard output, and new files get `0o666` less the umask in
//! every command (`forward` once replaced the path with a 0600 regular file whatever it was).

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use candle_core::Device;

use test_support::Scratch;

use crate::fill_mask::{model_dir, ok, scratch};

/// A model directory and an input file for `forward`, in scratch directory `name`.
fn forward_setup(name: &str) -> (Scratch, PathBuf, Scratch) {
    let model = model_dir("mlm_gelu", &format!("{name}-model"));
    let dir = scratch(name);
    let input = dir.join("input.json");
    std::fs::write(&input, r#"{"input_ids": [[7, 10, 11, 8]]}"#).unwrap();
    (model, input, dir)
}

fn forward_args<'a>(model: &'a Path, input: &'a Path, output: &'a str) -> Vec<&'a str> {
    vec![
        "forward",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output,
    ]
}

/// Asserts that `bytes` are a safetensors file holding forward's two outputs.
fn assert_forward_outputs(bytes: &[u8]) {
    let tensors = candle_core::safetensors::load_buffer(bytes, &Device::Cpu).unwrap();
    assert_eq!(tensors["last_hidden_state"].dims(), [1, 4, 32]);
    assert_eq!(tensors["logits"].dims(), [1, 4, 97]);
}

/// Runs `roformer args` under `sh -c 'umask MASK; ...'`, asserting success.
fn with_umask(mask: &str, args: &[&str]) -> Output {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("umask {mask}; exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_roformer"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_symlink_is_followed_and_stays_a_link() {
    let (model, input, dir) = forward_setup("out-link");
    std::fs::create_dir_all(dir.join("real")).unwrap();
    let target = dir.join("real/out.safetensors");
    std::fs::write(&target, b"old").unwrap();
    let link = dir.join("link.safetensors");
    std::os::unix::fs::symlink("real/out.safetensors", &link).unwrap();
    ok(&forward_args(&model, &input, link.to_str().unwrap()));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_forward_outputs(&std::fs::read(&target).unwrap());
    // A dangling link: its target is created.
    let dangling = dir.join("dangling.safetensors");
    std::os::unix::fs::symlink("real/new.safetensors", &dangling).unwrap();
    ok(&forward_args(&model, &input, dangling.to_str().unwrap()));
    assert!(std::fs::symlink_metadata(&dangling)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_forward_outputs(&std::fs::read(dir.join("real/new.safetensors")).unwrap());
}

#[test]
fn a_fifo_is_written_as_a_stream() {
    let (model, input, dir) = forward_setup("out-fifo");
    let fifo = dir.join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // Opening a FIFO blocks until both ends are open: read it in a thread.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(forward_args(&model, &input, fifo.to_str().unwrap()))
        .spawn()
        .unwrap();
    // A binary that replaced the FIFO would leave the reader blocked: bound the wait.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "forward did not finish");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO was replaced"
    );
    assert_forward_outputs(&reader.join().unwrap());
}

#[test]
fn dev_null_stays_a_device_and_dash_is_stdout() {
    let (model, input, _dir) = forward_setup("out-dev");
    ok(&forward_args(&model, &input, "/dev/null"));
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    let out = crate::common::roformer_ok(&forward_args(&model, &input, "-"));
    assert_forward_outputs(&out.stdout);
    // The summary goes to stderr, out of the data's way.
    assert!(String::from_utf8_lossy(&out.stderr).contains("last_hidden_state [1, 4, 32]"));
}

#[test]
fn embed_writes_json_lines_to_dash() {
    let model = model_dir("mlm_gelu", "out-embed-dash-model");
    let dir = scratch("out-embed-dash");
    let input = dir.join("t.txt");
    std::fs::write(&input, "今天\n你好\n").unwrap();
    let out = crate::common::roformer_ok(&[
        "embed",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        "-",
    ]);
    let lines: Vec<Vec<f32>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].len(), 32);
}

/// New and replaced files of forward, embed and vocab build get 0o666 less the umask.
#[test]
fn modes_follow_the_umask() {
    let (model, input, dir) = forward_setup("out-umask");
    let texts = dir.join("texts.txt");
    std::fs::write(&texts, "今天天气\n我们在北京\n今天天气\n我们在北京\n").unwrap();
    for (mask, want) in [("022", 0o644), ("077", 0o600), ("022", 0o644)] {
        let forward = dir.join("f.safetensors");
        with_umask(
            mask,
            &forward_args(&model, &input, forward.to_str().unwrap()),
        );
        assert_eq!(mode(&forward), want, "forward, umask {mask}");
        let vectors = dir.join("v.npy");
        with_umask(
            mask,
            &[
                "embed",
                "--model",
                model.to_str().unwrap(),
                "--input",
                texts.to_str().unwrap(),
                "--output",
                vectors.to_str().unwrap(),
            ],
        );
        assert_eq!(mode(&vectors), want, "embed, umask {mask}");
        let vocab = dir.join("vocab/vocab.txt");
        std::fs::create_dir_all(dir.join("vocab")).unwrap();
        with_umask(
            mask,
            &[
                "vocab",
                "build",
                "--corpus",
                texts.to_str().unwrap(),
                "--size",
                "20",
                "--min-count",
                "1",
                "--out",
                vocab.to_str().unwrap(),
                "--tokenizer-config",
                dir.join("vocab/tokenizer_config.json").to_str().unwrap(),
            ],
        );
        assert_eq!(mode(&vocab), want, "vocab.txt, umask {mask}");
        assert_eq!(
            mode(&dir.join("vocab/tokenizer_config.json")),
            want,
            "tokenizer_config.json, umask {mask}"
        );
    }
}
