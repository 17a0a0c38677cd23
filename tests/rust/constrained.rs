//! Constrained decoding on the real default model (SmolLM2-135M-Instruct): JSON Schemas, JSON objects, regular
//! expressions, GBNF and Lark grammars hold for every sampler setting; the tokens a grammar forces are appended
//! unsampled; a bad grammar is `E_GRAMMAR` before any token and leaves the session as it was.
//! Runs natively and on wasm32 (Node), with the same expectations on both.

#[path = "support/mod.rs"]
mod support;

use ruvllm::constraint::GrammarSource;
use ruvllm::{ChatMessage, Error, FinishReason, GenerateOptions, Output, RenderOptions, SamplerConfig, Session};
use serde_json::{json, Value};
use support::default_model as model;
use support::test;
use support::test_support::{lark_rule_chain, ref_chain_schema};

/// The chat prompt of one user message, as the model's template renders it.
fn prompt(user: &str) -> Vec<u32> {
    model().text().chat_prompt_ids(&[ChatMessage::new("user", user)], &RenderOptions::default(), false).unwrap()
}

fn generate(user: &str, grammar: GrammarSource, sampler: SamplerConfig, max_tokens: usize) -> Output {
    let mut session = Session::new(model());
    let opts = GenerateOptions { max_tokens, sampler, grammar: Some(grammar), ..GenerateOptions::default() };
    let mut streamed = String::new();
    let out = session.generate(&prompt(user), opts, None, |t| streamed.push_str(&t.text)).unwrap();
    assert_eq!(streamed, out.text);
    out
}

/// The sampler settings every grammar must hold under: greedy, llama.cpp's defaults, the whole distribution
/// at a high temperature (where unconstrained output wanders most), and every penalty.
fn samplers() -> Vec<SamplerConfig> {
    let wide = SamplerConfig { temperature: 1.5, top_k: 0, top_p: 1.0, min_p: 0.0, ..SamplerConfig::default() };
    vec![
        SamplerConfig::greedy(),
        SamplerConfig { seed: 7, ..SamplerConfig::default() },
        SamplerConfig { seed: 1, ..wide.clone() },
        SamplerConfig { seed: 2, ..wide },
        SamplerConfig {
            repeat_penalty: 1.3,
            presence_penalty: 0.5,
            frequency_penalty: 0.5,
            seed: 3,
            ..SamplerConfig::default()
        },
    ]
}

/// A person: a name, an age in 0..=150, a role from a list, up to three tags, a boolean.
fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "minLength": 1, "maxLength": 40 },
            "age": { "type": "integer", "minimum": 0, "maximum": 150 },
            "role": { "enum": ["admin", "editor", "viewer"] },
            "tags": { "type": "array", "items": { "type": "string", "maxLength": 12 }, "maxItems": 3 },
            "active": { "type": "boolean" }
        },
        "required": ["name", "age", "role", "active"],
        "additionalProperties": false
    })
}

fn check_person(v: &Value) -> Result<(), String> {
    let o = v.as_object().ok_or("not an object")?;
    for key in o.keys() {
        if !["name", "age", "role", "tags", "active"].contains(&key.as_str()) {
            return Err(format!("unexpected key {key}"));
        }
    }
    let name = o.get("name").and_then(Value::as_str).ok_or("name")?;
    let age = o.get("age").and_then(Value::as_i64).ok_or("age")?;
    let role = o.get("role").and_then(Value::as_str).ok_or("role")?;
    o.get("active").and_then(Value::as_bool).ok_or("active")?;
    let name_chars = name.chars().count();
    if !(1..=40).contains(&name_chars) || !(0..=150).contains(&age) || !["admin", "editor", "viewer"].contains(&role) {
        return Err("a value out of its range".into());
    }
    if let Some(tags) = o.get("tags") {
        let tags = tags.as_array().ok_or("tags")?;
        if tags.len() > 3 || tags.iter().any(|t| t.as_str().is_none_or(|t| t.chars().count() > 12)) {
            return Err("tags".into());
        }
    }
    Ok(())
}

#[test]
fn json_schema_holds_under_every_sampler() {
    for sampler in samplers() {
        let out =
            generate("Describe a user of a web app.", GrammarSource::JsonSchema(person_schema()), sampler.clone(), 96);
        assert_eq!(out.finish, FinishReason::Stop, "{sampler:?}: {:?}", out.text);
        let v: Value = serde_json::from_str(&out.text).unwrap_or_else(|e| panic!("{sampler:?}: {:?}: {e}", out.text));
        check_person(&v).unwrap_or_else(|e| panic!("{sampler:?}: {v}: {e}"));
        // `{"name": "` comes whole after the first token, the other keys after each value.
        assert!(out.stats.forced_tokens >= 4, "{sampler:?}: {} forced", out.stats.forced_tokens);
    }
}

#[test]
fn a_constant_is_forced_whole_without_sampling() {
    let schema = json!({ "const": { "answer": "forty-two", "sure": true } });
    let out = generate("What is the answer?", GrammarSource::JsonSchema(schema), SamplerConfig::greedy(), 64);
    assert_eq!(out.text, r#"{"answer": "forty-two", "sure": true}"#);
    assert_eq!(out.finish, FinishReason::Stop);
    assert_eq!(out.stats.forced_tokens, out.stats.generated_tokens, "every token, the end one too, was forced");
    assert!(model().tokenizer().is_eog(*out.ids.last().unwrap()));
}

#[test]
fn json_object_regex_gbnf_and_lark_hold() {
    // Greedy, the whole distribution, the penalties: the settings most apt to wander.
    for sampler in [samplers()[0].clone(), samplers()[2].clone(), samplers()[4].clone()] {
        let out = generate("Give me a JSON object about Paris.", GrammarSource::JsonObject, sampler.clone(), 64);
        if out.finish == FinishReason::Stop {
            let v: Value = serde_json::from_str(&out.text).unwrap_or_else(|e| panic!("{:?}: {e}", out.text));
            assert!(v.is_object(), "{v}");
        } else {
            assert!(out.text.starts_with('{'), "{:?}", out.text);
        }

        let phone = GrammarSource::Regex(r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}".into());
        let out = generate("Make up a phone number.", phone, sampler.clone(), 32);
        let shape: String = out.text.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect();
        assert_eq!(shape, "(999) 999-9999", "{sampler:?}: {:?}", out.text);

        let yes_no = GrammarSource::Gbnf("root ::= answer \".\"\nanswer ::= \"yes\" | \"no\"  # one word\n".into());
        let out = generate("Is Paris in France?", yes_no, sampler.clone(), 8);
        assert!(["yes.", "no."].contains(&out.text.as_str()), "{sampler:?}: {:?}", out.text);

        let lark = GrammarSource::Lark("start: \"The answer is \" NUMBER \".\"\nNUMBER: /[1-9][0-9]{0,3}/\n".into());
        let out = generate("What is six times seven?", lark, sampler.clone(), 16);
        let number = out.text.strip_prefix("The answer is ").and_then(|t| t.strip_suffix('.'));
        assert!(number.is_some_and(|n| n.parse::<u32>().is_ok()), "{sampler:?}: {:?}", out.text);
    }
}

#[test]
fn a_bad_grammar_is_refused_before_any_token_and_changes_nothing() {
    let mut session = Session::new(model());
    let greedy = |grammar| GenerateOptions {
        max_tokens: 8,
        sampler: SamplerConfig::greedy(),
        grammar,
        ..GenerateOptions::default()
    };
    let first = session.generate(&prompt("Hello!"), greedy(None), None, |_| {}).unwrap();
    let held = session.tokens().to_vec();
    assert!(!first.ids.is_empty() && !held.is_empty());
    let bad = [
        GrammarSource::JsonSchema(json!({ "type": "objekt" })),
        GrammarSource::JsonSchema(json!({ "$ref": "https://example.com/remote.json" })),
        GrammarSource::JsonSchema(json!({ "type": "string", "minLength": 5, "maxLength": 2 })),
        GrammarSource::JsonSchema(json!([1, 2])),
        GrammarSource::Regex("a(b".into()),
        GrammarSource::Gbnf("root ::= missing-rule".into()),
        GrammarSource::Gbnf("root ::= \"unterminated".into()),
        GrammarSource::Lark("start: (\n".into()),
        GrammarSource::Lark("start: other\n".into()),
        GrammarSource::Regex("x".repeat(ruvllm::constraint::MAX_GRAMMAR_BYTES + 1)),
    ];
    for grammar in bad {
        let mut tokens = 0;
        let r = session.generate(&prompt("Hello again!"), greedy(Some(grammar.clone())), None, |_| tokens += 1);
        match r {
            Err(Error::Grammar(message)) => assert!(!message.is_empty()),
            other => panic!("{grammar:?}: {other:?}"),
        }
        assert_eq!(tokens, 0);
        assert_eq!(session.tokens(), held, "{grammar:?} changed the session");
    }
}

#[test]
fn grammars_beyond_the_limits_end_in_e_grammar() {
    // Each needs more lexer states or parser items in one step than llguidance's limits allow: refused at its
    // first steps, not run for minutes or into gigabytes.
    let costly = [
        GrammarSource::Regex("((a{1000}){1000}){1000}".into()),
        GrammarSource::Gbnf("root ::= (((\"a\"){1000}){1000}){1000}".into()),
        GrammarSource::Lark("start: x{9000}\nx: y{9000}\ny: \"a\"\n".into()),
    ];
    for grammar in costly {
        let mut session = Session::new(model());
        let opts = GenerateOptions {
            max_tokens: 24,
            sampler: SamplerConfig::greedy(),
            grammar: Some(grammar.clone()),
            ..GenerateOptions::default()
        };
        match session.generate(&prompt("Go."), opts, None, |_| {}) {
            Err(Error::Grammar(message)) => assert!(!message.contains("<state>"), "{message}"),
            other => panic!("{grammar:?}: {other:?}"),
        }
    }
}

#[test]
fn chains_deeper_than_the_compilers_stack_are_refused_before_compiling() {
    // llguidance compiles along `$ref` chains and Lark rule references recursively: a few hundred levels overflow
    // a 1 MiB stack (an abort natively, a trap in wasm). Those at the limit compile; deeper ones are E_GRAMMAR.
    let ref_chain = |n| GrammarSource::JsonSchema(ref_chain_schema(n));
    let lark_chain = |n| GrammarSource::Lark(lark_rule_chain(n));
    let nested = |n: usize| {
        let mut schema = json!({ "type": "string" });
        for _ in 0..n {
            schema = json!({ "anyOf": [schema, { "type": "null" }] });
        }
        GrammarSource::JsonSchema(schema)
    };
    let compiler = model().text().grammar_compiler().unwrap();
    let limit = ruvllm::constraint::MAX_COMPILE_DEPTH;
    for ok in [ref_chain(limit / 2 - 2), lark_chain(limit - 3), nested(limit / 3)] {
        compiler.compile(&ok).unwrap_or_else(|e| panic!("{e}"));
    }
    for deep in [ref_chain(400), ref_chain(5000), lark_chain(400), lark_chain(20000), nested(1000)] {
        match compiler.compile(&deep) {
            Err(Error::Grammar(message)) => assert!(message.contains("levels deep"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}

/// JSONSchemaBench's MaskBench instances (tests/fixtures/maskbench/sample.json: 42 schemas of its data/ folder, a seeded
/// sample, with their valid and invalid instances) written in the output's JSON layout and read token by token through
/// the masks the generation applies: every valid instance is taken whole and every invalid one refused.
#[test]
fn maskbench_valid_instances_are_taken_and_invalid_ones_refused() {
    let sample: Value = serde_json::from_str(include_str!("../fixtures/maskbench/sample.json")).unwrap();
    let model = model();
    let compiler = model.text().grammar_compiler().unwrap();
    let mut logits = vec![0f32; model.config.vocab_size];
    let (mut valid, mut invalid, mut uncompiled) = (0, 0, Vec::new());
    let mut wrong = Vec::new();
    for case in sample.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let source = GrammarSource::JsonSchema(case["schema"].clone());
        if let Err(e) = compiler.compile(&source) {
            uncompiled.push(format!("{name}: {e}"));
            continue;
        }
        for (i, test) in case["tests"].as_array().unwrap().iter().enumerate() {
            let text = layout(&test["data"]);
            let taken = takes(&mut compiler.compile(&source).unwrap(), &text, &mut logits);
            let is_valid = test["valid"].as_bool().unwrap();
            if is_valid {
                valid += 1
            } else {
                invalid += 1
            }
            if taken != is_valid {
                wrong.push(format!("{name} test {i} (valid: {is_valid}): {text}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {valid} valid and {invalid} invalid instances read wrongly:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Whether `constraint` takes `text` whole, as a generation would write it: a token of the text's tokenization the
/// mask allows, then the tokens the grammar forces after it (their text must be the text's next), and so on; at the
/// end, an end-of-generation token.
fn takes(constraint: &mut ruvllm::constraint::Constraint, text: &str, logits: &mut [f32]) -> bool {
    let tokenizer = model().tokenizer().clone();
    let eos = tokenizer.eos().unwrap();
    let mut rest = text.as_bytes();
    loop {
        logits.fill(0.0);
        if constraint.mask_logits(logits).is_err() {
            return false;
        }
        if rest.is_empty() {
            return logits[eos as usize] != f32::NEG_INFINITY;
        }
        let rest_text = std::str::from_utf8(rest).expect("tokens end on a character boundary here");
        let next = tokenizer.encode(rest_text, false).unwrap()[0];
        if logits[next as usize] == f32::NEG_INFINITY {
            return false;
        }
        let Ok(forced) = constraint.commit(next) else { return false };
        for id in std::iter::once(next).chain(forced) {
            if id == eos {
                return rest.is_empty();
            }
            let Some(after) = rest.strip_prefix(tokenizer.token_bytes(id).unwrap()) else { return false };
            rest = after;
        }
    }
}

/// `v` in the output's layout (`", "` and `": "`, nothing else between tokens), keys in their order.
fn layout(v: &Value) -> String {
    match v {
        Value::Array(items) => format!("[{}]", items.iter().map(layout).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", Value::from(k.as_str()), layout(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        scalar => scalar.to_string(),
    }
}

/// Real-world schemas (`support::schemas`, the 50 that npm/test/grammar.test.mjs asks the wasm build in Node for): each
/// is taken, most answers finish within the token limit, and every finished answer is JSON that validates under its
/// schema. Natively (tests/browser/browser.test.mjs asks Chromium for 10 of them, tests/rust/gpu.rs lavapipe for 5).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn real_world_schemas_give_answers_that_validate() {
    use support::schemas;
    let Some(sample) = schemas::kubernetes(50) else { return };
    let mut session = Session::new(model());
    let (mut finished, mut failures) = (0, Vec::new());
    for (file, schema) in &sample {
        let out = schemas::answer(&mut session, file, schema);
        finished += usize::from(out.finish == FinishReason::Stop);
        failures.extend(schemas::invalid(file, schema, &out));
    }
    eprintln!("real-world schemas: {} asked, {finished} finished, {} invalid", sample.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(finished * 10 >= sample.len() * 8, "only {finished} of {} answers finished", sample.len());
}
