//! The command line's grammar: each command declares its options and positional arguments in one table
//! (`Command`), and both the parser's checks and the usage text come from it.
//!
//! `--name value`, `--name=value`, `--flag`, positionals. `--` ends the options: everything after it is
//! positional, even if it begins with `-`. `--help` or `-h` anywhere before `--` asks for the usage.

use std::collections::HashMap;
use std::str::FromStr;

/// One option a command takes.
pub struct Opt {
    pub name: &'static str,
    /// What the value is called in the usage text; empty for a boolean flag.
    pub value: &'static str,
    pub required: bool,
    /// Every value counts (`Args::all`); other options given twice keep the last one.
    pub repeats: bool,
}

pub const fn flag(name: &'static str) -> Opt {
    Opt { name, value: "", required: false, repeats: false }
}

pub const fn value(name: &'static str, value: &'static str) -> Opt {
    Opt { name, value, required: false, repeats: false }
}

pub const fn required(name: &'static str, value: &'static str) -> Opt {
    Opt { name, value, required: true, repeats: false }
}

pub const fn repeated(name: &'static str, value: &'static str) -> Opt {
    Opt { name, value, required: false, repeats: true }
}

impl Opt {
    fn is_flag(&self) -> bool {
        self.value.is_empty()
    }

    /// `--name V`, `[--name V]` or `[--name V]...`, as the usage shows it.
    pub fn usage(&self) -> String {
        let mut s = format!("--{}", self.name);
        if !self.is_flag() {
            s = format!("{s} {}", self.value);
        }
        match (self.required, self.repeats) {
            (true, _) => s,
            (false, false) => format!("[{s}]"),
            (false, true) => format!("[{s}]..."),
        }
    }
}

pub struct Command {
    pub name: &'static str,
    pub run: fn(&Args) -> Result<(), String>,
    /// Its own options; every command also takes the common ones passed to `parse` and `usage`.
    pub options: &'static [Opt],
    /// What its positional arguments are called, if it takes them (one or more, required).
    pub positional: Option<&'static str>,
}

impl Command {
    /// `{prefix}ruvllm NAME OPTIONS... POSITIONAL...`, wrapped at 100 columns under its first option.
    pub fn synopsis(&self, prefix: &str) -> String {
        let head = format!("{prefix}ruvllm {}", self.name);
        let words = self.options.iter().map(Opt::usage).chain(self.positional.map(|p| format!("{p}...")));
        wrap(&head, words)
    }
}

/// `head` and the words after it, wrapped at 100 columns; continuation lines are indented under the first word.
pub fn wrap(head: &str, words: impl Iterator<Item = String>) -> String {
    let indent = " ".repeat(head.len() + 1);
    let mut out = head.to_string();
    let mut line_len = head.len();
    for w in words {
        if line_len + 1 + w.len() > 100 && line_len > indent.len() {
            out += &format!("\n{indent}{w}");
            line_len = indent.len() + w.len();
        } else {
            out += &format!(" {w}");
            line_len += 1 + w.len();
        }
    }
    out
}

/// A command line that asks for the usage, or one to run.
pub enum Parsed {
    Help,
    Run(Args),
}

#[derive(Debug, Default)]
pub struct Args {
    options: HashMap<String, Vec<String>>,
    pub positional: Vec<String>,
}

impl Args {
    /// Parse `cmd`'s arguments against its table and `common`. Errors name the option or argument at fault;
    /// `--help` wins over them, so that a wrong command line can still ask what the right one is.
    pub fn parse(cmd: &Command, common: &[Opt], argv: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
        let mut args = Args::default();
        let mut error = None;
        let mut argv = argv.into_iter();
        while let Some(arg) = argv.next() {
            if arg == "--" {
                args.positional.extend(argv.by_ref());
                break;
            }
            if arg == "--help" || arg == "-h" {
                return Ok(Parsed::Help);
            }
            // A lone `-` or `-5 apples` is text, as it always was here: only `--` starts an option.
            let Some(spec) = arg.strip_prefix("--") else {
                args.positional.push(arg);
                continue;
            };
            let (name, inline) = match spec.split_once('=') {
                Some((name, v)) => (name, Some(v.to_string())),
                None => (spec, None),
            };
            let value = match cmd.options.iter().chain(common).find(|o| o.name == name) {
                None => Err(format!("unknown option --{name} for '{}'", cmd.name)),
                Some(o) if o.is_flag() => inline.map_or(Ok(String::new()), |_| Err(format!("--{name} takes no value"))),
                // The next argument is the value whatever it looks like, so `--prompt -5` works.
                Some(_) => inline.or_else(|| argv.next()).ok_or_else(|| format!("--{name} needs a value")),
            };
            match value {
                Ok(v) => args.options.entry(name.to_string()).or_default().push(v),
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        if let Some(o) = cmd.options.iter().chain(common).find(|o| o.required && !args.flag(o.name)) {
            return Err(format!("--{} is required", o.name));
        }
        match (cmd.positional, args.positional.first()) {
            (Some(name), None) => return Err(format!("missing {name}")),
            (None, Some(extra)) => return Err(format!("unexpected argument '{extra}': '{}' takes none", cmd.name)),
            _ => {}
        }
        Ok(Parsed::Run(args))
    }

    pub fn flag(&self, name: &str) -> bool {
        self.options.contains_key(name)
    }

    pub fn opt(&self, name: &str) -> Option<&str> {
        self.options.get(name).and_then(|v| v.last()).map(String::as_str)
    }

    /// A required option's value: `parse` has checked that it is there.
    pub fn required(&self, name: &str) -> &str {
        self.opt(name).unwrap_or_else(|| panic!("--{name} is not declared required"))
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

#[cfg(test)]
mod tests {
    use super::*;

    const COMMON: &[Opt] = &[value("model", "M")];
    const SAY: Command = Command {
        name: "say",
        run: |_| Ok(()),
        options: &[flag("loud"), value("times", "N"), repeated("to", "NAME")],
        positional: Some("TEXT"),
    };
    const ASK: Command =
        Command { name: "ask", run: |_| Ok(()), options: &[required("question", "TEXT")], positional: None };

    fn parse(cmd: &Command, argv: &[&str]) -> Result<Parsed, String> {
        Args::parse(cmd, COMMON, argv.iter().map(|s| s.to_string()))
    }

    fn run(cmd: &Command, argv: &[&str]) -> Args {
        match parse(cmd, argv) {
            Ok(Parsed::Run(args)) => args,
            Ok(Parsed::Help) => panic!("{argv:?}: help"),
            Err(e) => panic!("{argv:?}: {e}"),
        }
    }

    fn error(cmd: &Command, argv: &[&str]) -> String {
        match parse(cmd, argv) {
            Err(e) => e,
            Ok(_) => panic!("{argv:?} parsed"),
        }
    }

    #[test]
    fn options_flags_and_positionals() {
        let a = run(&SAY, &["--model", "m.gguf", "--loud", "hi", "--times=3", "there", "--to", "a", "--to", "b"]);
        assert_eq!(a.opt("model"), Some("m.gguf"));
        assert!(a.flag("loud"));
        assert_eq!(a.num("times", 1), Ok(3));
        assert_eq!(a.all("to"), ["a", "b"]);
        assert_eq!(a.positional, ["hi", "there"]);
        assert!(!run(&SAY, &["x"]).flag("loud"));
    }

    #[test]
    fn double_dash_ends_the_options() {
        let a = run(&SAY, &["--loud", "--", "--times", "-h", "--", "-5 apples"]);
        assert_eq!(a.positional, ["--times", "-h", "--", "-5 apples"]);
        assert!(a.opt("times").is_none());
        // A single dash does not start an option, so `-5 apples` is text without `--` too.
        assert_eq!(run(&SAY, &["-5 apples", "-"]).positional, ["-5 apples", "-"]);
        assert_eq!(error(&SAY, &["--loud", "--"]), "missing TEXT");
    }

    #[test]
    fn a_value_is_the_next_argument_whatever_it_looks_like() {
        let a = run(&SAY, &["--to", "--loud", "--times", "-1", "--to=--", "x"]);
        assert_eq!(a.all("to"), ["--loud", "--"]);
        assert_eq!(a.opt("times"), Some("-1"));
        assert!(!a.flag("loud"));
    }

    #[test]
    fn help_anywhere_before_double_dash() {
        for argv in [&["--help"][..], &["x", "-h"], &["--nope", "--help"], &["--times", "3", "-h", "--times"]] {
            assert!(matches!(parse(&SAY, argv), Ok(Parsed::Help)), "{argv:?}");
        }
        assert!(matches!(parse(&ASK, &["--help"]), Ok(Parsed::Help)), "a required option is not needed for help");
        assert_eq!(run(&SAY, &["--", "--help"]).positional, ["--help"]);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(error(&SAY, &["x", "--lora", "a.gguf"]), "unknown option --lora for 'say'");
        assert_eq!(error(&ASK, &["--question", "q", "--loud"]), "unknown option --loud for 'ask'");
        assert_eq!(error(&SAY, &["x", "--times"]), "--times needs a value");
        assert_eq!(error(&SAY, &["x", "--loud=yes"]), "--loud takes no value");
        assert_eq!(error(&SAY, &["--loud"]), "missing TEXT");
        assert_eq!(error(&ASK, &["--model", "m"]), "--question is required");
        assert_eq!(error(&ASK, &["--question", "q", "extra"]), "unexpected argument 'extra': 'ask' takes none");
        assert_eq!(run(&ASK, &["--question=a=b"]).required("question"), "a=b");
    }

    #[test]
    fn numbers() {
        let a = run(&SAY, &["--times", "lots", "x"]);
        assert_eq!(a.num::<u32>("times", 1), Err("--times: 'lots' is not a valid number".into()));
        assert_eq!(a.num("model", 0.5), Ok(0.5), "the default when the option is not given");
    }

    #[test]
    fn usage_comes_from_the_table() {
        assert_eq!(SAY.synopsis(""), "ruvllm say [--loud] [--times N] [--to NAME]... TEXT...");
        assert_eq!(ASK.synopsis("usage: "), "usage: ruvllm ask --question TEXT");
        let long = wrap("ruvllm long", (0..30).map(|i| format!("[--option{i} N]")));
        assert!(long.lines().count() > 1 && long.lines().all(|l| l.len() <= 100), "{long}");
        assert!(long.lines().skip(1).all(|l| l.starts_with("            [--option")), "{long}");
    }
}
