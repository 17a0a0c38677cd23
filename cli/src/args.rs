//! Minimal `--name value` / `--flag` / positional argument parsing for the CLI.

use std::collections::HashMap;
use std::str::FromStr;

const FLAGS: &[&str] = &["special", "chat", "json", "ignore-eos"];

pub struct Args {
    options: HashMap<String, Vec<String>>,
    pub positional: Vec<String>,
}

impl Args {
    pub fn parse(argv: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut options: HashMap<String, Vec<String>> = HashMap::new();
        let mut positional = Vec::new();
        let mut argv = argv.peekable();
        while let Some(a) = argv.next() {
            match a.strip_prefix("--") {
                Some(name) if FLAGS.contains(&name) => options.entry(name.into()).or_default().push(String::new()),
                Some(name) => {
                    let v = argv.next().ok_or_else(|| format!("--{name} needs a value"))?;
                    options.entry(name.into()).or_default().push(v);
                }
                None => positional.push(a),
            }
        }
        Ok(Args { options, positional })
    }

    pub fn flag(&self, name: &str) -> bool {
        self.options.contains_key(name)
    }

    pub fn opt(&self, name: &str) -> Option<&str> {
        self.options.get(name).and_then(|v| v.last()).map(String::as_str)
    }

    pub fn all(&self, name: &str) -> Vec<String> {
        self.options.get(name).cloned().unwrap_or_default()
    }

    pub fn num<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.opt(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{name}: '{v}' is not a valid number")),
        }
    }
}
