//! The built `ruvllm` binary's command line: `--`, `--help`, and the errors for a wrong command line.
//! Only the last test loads a model; the others fail before any model is read (their --model does not exist).

use std::process::{Command, Output};

fn ruvllm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ruvllm")).args(args).env_remove("RUVLLM_MODEL").output().expect("ruvllm runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into()
}

/// Runs `args`, which must be refused as a wrong command line (exit 2) with a message holding `message`.
fn assert_usage_error(args: &[&str], message: &str) {
    let out = ruvllm(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    assert!(stderr(&out).contains(message), "{args:?}: expected {message:?} in {:?}", stderr(&out));
    assert!(out.stdout.is_empty(), "{args:?}");
}

const NO_MODEL: &str = "/nonexistent/model.gguf";

#[test]
fn help_prints_the_commands_usage_and_exits_0() {
    for args in [
        &["generate", "--help"][..],
        &["generate", "-h"],
        &["generate", "--model", NO_MODEL, "--temperature", "0", "--help"],
        &["generate", "--lora", "x.gguf", "--help"],
        &["help", "generate"],
    ] {
        let out = ruvllm(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(text.starts_with("usage: ruvllm generate --prompt TEXT [--chat] [--max-tokens N]"), "{args:?}: {text}");
        assert!(text.contains("[--stop S]...") && text.contains("[--model M]"), "{args:?}: {text}");
        assert!(!text.contains("ruvllm score"), "{args:?}: only generate's usage: {text}");
    }
    let tokenize = stdout(&ruvllm(&["tokenize", "-h"]));
    assert!(tokenize.starts_with("usage: ruvllm tokenize [--special] TEXT..."), "{tokenize}");
    for args in [&["--help"][..], &["-h"], &["help"]] {
        let out = ruvllm(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        for cmd in ["tokenize", "generate", "score", "embed", "bench"] {
            assert!(stdout(&out).contains(&format!("\n  ruvllm {cmd} ")), "{args:?} lists {cmd}: {}", stdout(&out));
        }
    }
}

#[test]
fn no_command_prints_the_usage_and_exits_2() {
    let out = ruvllm(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("usage: ruvllm COMMAND"), "{}", stderr(&out));
}

#[test]
fn wrong_command_lines_exit_2_naming_the_problem() {
    assert_usage_error(&["frobnicate", "--model", NO_MODEL], "unknown command 'frobnicate'");
    assert_usage_error(&["score", "--model", NO_MODEL, "--ids", "1,2", "--lora", "x.gguf"], "unknown option --lora");
    assert_usage_error(&["tokenize", "--model", NO_MODEL, "--json", "x"], "unknown option --json for 'tokenize'");
    assert_usage_error(
        &["generate", "--model", NO_MODEL, "--prompt", "x", "--max-tokens"],
        "--max-tokens needs a value",
    );
    assert_usage_error(&["generate", "--model", NO_MODEL, "--prompt", "x", "--json=yes"], "--json takes no value");
    assert_usage_error(&["tokenize", "--model", NO_MODEL], "missing TEXT");
    assert_usage_error(&["tokenize", "--model", NO_MODEL, "--"], "missing TEXT");
    assert_usage_error(&["generate", "--model", NO_MODEL], "--prompt is required");
    assert_usage_error(&["score", "--model", NO_MODEL], "--ids is required");
    assert_usage_error(&["bench", "--model", NO_MODEL, "128"], "unexpected argument '128'");
    // The usage of the command follows the error.
    assert_usage_error(&["score", "--lora", "x"], "usage: ruvllm score --ids 1,2,3 [--top-k K]");
}

#[test]
fn a_right_command_line_gets_as_far_as_loading_the_model() {
    for args in [
        &["tokenize", "--model", NO_MODEL, "--", "-5 apples"][..],
        &["tokenize", "--model", NO_MODEL, "-5 apples"],
        &["tokenize", "--model", NO_MODEL, "--", "--help"],
        &["generate", "--model", NO_MODEL, "--prompt", "-x", "--stop=--", "--stop", "a=b", "--json"],
        &["score", "--model=/nonexistent/model.gguf", "--ids=1,2", "--top-k", "3"],
        &["bench", "--model", NO_MODEL, "--threads", "1", "--ctx", "64", "--prompt-tokens", "4", "--gen-tokens", "2"],
    ] {
        let out = ruvllm(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).starts_with(&format!("error: {NO_MODEL}: ")), "{args:?}: {}", stderr(&out));
    }
}

/// The default model, as tests/rust/support finds it: $RUVLLM_MODEL, else where scripts/fetch-model.sh puts it.
fn model_path() -> String {
    let path = std::env::var("RUVLLM_MODEL").unwrap_or_else(|_| {
        let home = std::env::var("HOME").expect("HOME is set");
        let cache = std::env::var("RUVLLM_CACHE").unwrap_or_else(|_| format!("{home}/.cache/ruvllm"));
        format!("{cache}/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    assert!(
        std::path::Path::new(&path).is_file(),
        "no model at {path}: set RUVLLM_MODEL or run scripts/fetch-model.sh"
    );
    path
}

fn tokenize(args: &[&str]) -> Vec<u32> {
    let out = ruvllm(&[&["tokenize"], args].concat());
    assert_eq!(out.status.code(), Some(0), "tokenize {args:?}: {}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("tokenize prints JSON");
    serde_json::from_value(json["ids"].clone()).expect("ids")
}

#[test]
fn text_after_double_dash_is_tokenized_even_if_it_begins_with_a_dash() {
    let model = model_path();
    let loaded = ruvllm::Model::from_file(&model).expect("the model loads");
    let encode = |text: &str| loaded.tokenizer().encode(text, false).unwrap();
    let expected = encode("-5 apples");
    assert!(expected.len() > 1);
    assert_eq!(tokenize(&["--model", &model, "--", "-5 apples"]), expected);
    assert_eq!(tokenize(&["--model", &model, "-5 apples"]), expected);
    assert_eq!(
        tokenize(&[&format!("--model={model}"), "-5", "--", "apples"]),
        expected,
        "positionals join with spaces"
    );
    // After `--`, what looks like an option is text too.
    assert_eq!(tokenize(&["--model", &model, "--", "--special", "-h"]), encode("--special -h"));
}
