//! llama.cpp's GBNF grammars, translated to the Lark dialect that llguidance compiles.
//!
//! GBNF (llama.cpp's grammars/README.md; its parser is src/llama-grammar.cpp) is what users pass as
//! `grammar` or `--grammar FILE`. The translation runs in three steps, each a function below:
//! `Parser` reads the text into `Rule`s (all syntax errors come from here, with their position),
//! `resolve` checks the references (and how deep llguidance will recurse through them), picks the
//! terminals and names the rules, and `emit` writes the Lark text.
//!
//! Where the two dialects differ:
//! - Lark's start symbol is `start`; GBNF's is `root`.
//! - llguidance lexes before it parses: UPPERCASE rules are terminals (regular expressions, one lexeme
//!   each) and lowercase rules are context-free. A rule made only of literals, character classes and
//!   references to such rules is written as a terminal. Left lowercase, each character of it would be a
//!   lexeme of its own for the Earley parser, slow enough for llguidance to refuse some grammars.
//! - Lexemes are greedy: one goes on while the next character can extend it, even where the grammar
//!   would need that character to start the next one. So `root ::= num num` with `num ::= [0-9]+`
//!   refuses "12", and in llama.cpp's arithmetic.gbnf a line cannot end after a name or number, whose
//!   terminals end in `ws ::= [ \t\n]*` and take the newline. llama.cpp, which has no lexer, takes both.
//! - GBNF's `.` matches any character, newline included; Lark's `/./` does not, so `.` becomes `/(?s:.)/`.
//! - Lark refuses `x{0}`; a repetition of at most zero becomes `""`.
//! - llguidance's Lark parser takes about 30 levels of parentheses in a rule: deeper groups are
//!   written as rules of their own (of the same kind, so the grammar means the same).
//! - Names become Lark names: lowercase for rules, uppercase for terminals, a leading letter added where
//!   the GBNF name starts with a digit, `-` or `_`, and a `_2`, `_3`... suffix where two would collide.
//! - Tokens (`<[id]>`, `<name>`, `!<[id]>`) become llguidance's (`<[id]>`, `<name>`, `<[^id]>`); it looks
//!   a `<name>` up among the tokenizer's special tokens, where llama.cpp takes any text of one token.
//!
//! llama.cpp's parser is the reference for the syntax. This one also takes: a rule that goes on to the
//! next line outside parentheses (a rule ends where the next `name ::=` begins), and `_` in names (the
//! README allows it; the parser forgets it). It refuses, where llama.cpp does not: a rule defined twice
//! (llama.cpp keeps the last), an empty class `[]` or `[^]` (llama.cpp: the empty string), a reversed
//! range `[z-a]` (llama.cpp: an empty one), a repetition count above `MAX_REPEAT` (llama.cpp refuses a
//! minimum above 2000 and makes a larger maximum unbounded), nesting deeper than `MAX_NESTING` or chains
//! of rules deeper than `MAX_COMPILE_DEPTH` (bounds on the recursion here and in llguidance), and `!<name>`
//! (llguidance negates tokens by id only).

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write};

/// Largest count a repetition `{m,n}` may name. llguidance expands counts into rules or regex states, so a
/// grammar with huge counts is slow to compile; llama.cpp itself stops at 2000.
pub const MAX_REPEAT: u32 = 10_000;

/// Deepest nesting of groups (and of repetition operators stacked on one item). The parser and the
/// steps after it recurse once per level, so this bounds their stack use on hostile input. Grammars
/// from llama.cpp's JSON-schema converter nest about as deep as their longest property name.
pub const MAX_NESTING: usize = 200;

/// Deepest recursion of llguidance's compiler that a grammar may ask for. It compiles a rule where it
/// first meets a reference to it, recursively (from `start`, in text order), and recurses into every
/// group and repetition: so its stack grows with each reference followed and each group around the
/// references and in the last rule, which `resolve` adds up along that walk. A chain of about 400
/// terminals overflowed a 1 MiB stack (a wasm32 module's whole stack); the tests compile the deepest
/// grammars allowed in 1 MiB.
pub const MAX_COMPILE_DEPTH: usize = 200;

/// Why a GBNF grammar was refused, and where (1-based; the column counts characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GbnfError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for GbnfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for GbnfError {}

/// Translate a GBNF grammar (llama.cpp's syntax) to llguidance's Lark. Never panics.
pub fn gbnf_to_lark(src: &str) -> Result<String, GbnfError> {
    let rules = Parser::new(src).grammar()?;
    let (names, namer) = resolve(src, &rules)?;
    Ok(emit(&rules, &names, namer))
}

/// One GBNF rule, `name ::= body`. `at` is the byte offset of its name.
struct Rule {
    name: String,
    at: usize,
    body: Expr,
}

/// A rule body. Sequences and alternatives hold at least two items each, and no directly nested
/// sequence (alternative) in a sequence (alternative): the parser flattens them.
enum Expr {
    /// Characters in order; may be empty.
    Literal(String),
    /// One character of the inclusive ranges (or, negated, of none of them). Never empty.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `.`: any character.
    Any,
    /// A tokenizer token, already in llguidance's syntax: `<[12]>`, `<[^12]>` or `<name>`.
    Token(String),
    /// Another rule, by its GBNF name; `at` is the byte offset of the reference.
    Ref {
        name: String,
        at: usize,
    },
    Seq(Vec<Expr>),
    Alt(Vec<Expr>),
    /// `min..=max` copies of `item` (`max` None: unbounded). `min <= max <= MAX_REPEAT`.
    Repeat {
        item: Box<Expr>,
        min: u32,
        max: Option<u32>,
    },
}

/// Recursive descent over the text. `pos` is a byte offset into `src`, always at a char boundary.
struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// Whether the last whitespace skipped held a newline: a rule may only end at one.
    newline_skipped: bool,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Parser<'a> {
        // A byte-order mark is not part of the grammar.
        let pos = if src.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
        Parser { src, pos, newline_skipped: false }
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn error(&self, at: usize, message: impl Into<String>) -> GbnfError {
        error_at(self.src, at, message.into())
    }

    /// Skip blanks, newlines and `#` comments (to the end of their line).
    fn skip_space(&mut self) {
        self.newline_skipped = false;
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' => {
                    self.pos += 1;
                    self.newline_skipped = true;
                }
                '#' => self.pos += self.rest().find(['\r', '\n']).unwrap_or(self.rest().len()),
                _ => break,
            }
        }
    }

    /// Whether the text here starts a new rule: a name, then blanks, then `::=`.
    fn at_rule_start(&self) -> bool {
        let rest = self.rest();
        let name_len = rest.find(|c| !is_name_char(c)).unwrap_or(rest.len());
        name_len > 0 && rest[name_len..].trim_start_matches([' ', '\t']).starts_with("::=")
    }

    fn name(&mut self) -> &'a str {
        let rest = self.rest();
        let len = rest.find(|c| !is_name_char(c)).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn grammar(mut self) -> Result<Vec<Rule>, GbnfError> {
        let mut rules = Vec::new();
        self.skip_space();
        while self.peek().is_some() {
            if !rules.is_empty() && !self.newline_skipped {
                return Err(self.error(self.pos, "expected a newline before the next rule"));
            }
            rules.push(self.rule()?);
        }
        Ok(rules)
    }

    /// `name ::= alternatives`, up to the next rule or the end of the text (which it skips to).
    fn rule(&mut self) -> Result<Rule, GbnfError> {
        let at = self.pos;
        let name = self.name();
        if name.is_empty() {
            let what = self.peek().map_or("the end".to_string(), |c| format!("{c:?}"));
            return Err(self.error(at, format!("expected a rule name, found {what}")));
        }
        self.pos += self.rest().len() - self.rest().trim_start_matches([' ', '\t']).len();
        if !self.rest().starts_with("::=") {
            return Err(self.error(self.pos, format!("expected '::=' after the rule name `{name}`")));
        }
        self.pos += 3;
        self.skip_space();
        let body = self.alternatives(0)?;
        // The alternatives stop at the end, at the next rule, or at a ')' that closes no group.
        if self.peek() == Some(')') {
            return Err(self.error(self.pos, "')' without a matching '('"));
        }
        Ok(Rule { name: name.to_string(), at, body })
    }

    /// `sequence | sequence ...`. `depth` counts the enclosing groups.
    fn alternatives(&mut self, depth: usize) -> Result<Expr, GbnfError> {
        let mut alternatives = Vec::new();
        loop {
            match self.sequence(depth)? {
                Expr::Alt(inner) => alternatives.extend(inner),
                other => alternatives.push(other),
            }
            if self.peek() != Some('|') {
                break;
            }
            self.pos += 1;
            self.skip_space();
        }
        Ok(if alternatives.len() == 1 { alternatives.pop().unwrap() } else { Expr::Alt(alternatives) })
    }

    /// Items (each with its repetition operators), up to '|', ')', the end, or the next rule's start.
    fn sequence(&mut self, depth: usize) -> Result<Expr, GbnfError> {
        let mut items: Vec<Expr> = Vec::new();
        // Repetition operators applied to the last item so far: each is one more level of nesting.
        let mut stacked = 0;
        loop {
            let at = self.pos;
            let Some(c) = self.peek() else { break };
            let item = match c {
                '|' | ')' => break,
                '"' => self.literal()?,
                '[' => self.class()?,
                '.' => {
                    self.pos += 1;
                    Expr::Any
                }
                '(' => self.group(depth)?,
                '<' | '!' => self.token()?,
                '*' | '+' | '?' | '{' => {
                    let (min, max) = self.repetition()?;
                    let Some(item) = items.pop() else {
                        return Err(self.error(at, format!("{c:?} with nothing before it to repeat")));
                    };
                    stacked += 1;
                    if depth + stacked > MAX_NESTING {
                        return Err(self.error(at, format!("nesting deeper than {MAX_NESTING} levels")));
                    }
                    items.push(Expr::Repeat { item: Box::new(item), min, max });
                    self.skip_space();
                    continue;
                }
                c if is_name_char(c) => {
                    if self.at_rule_start() {
                        break;
                    }
                    Expr::Ref { name: self.name().to_string(), at }
                }
                c => return Err(self.error(at, format!("unexpected character {c:?}"))),
            };
            items.push(item);
            stacked = 0;
            self.skip_space();
        }
        let mut flat = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Expr::Seq(inner) => flat.extend(inner),
                other => flat.push(other),
            }
        }
        Ok(if flat.len() == 1 { flat.pop().unwrap() } else { Expr::Seq(flat) })
    }

    /// `( alternatives )`.
    fn group(&mut self, depth: usize) -> Result<Expr, GbnfError> {
        let open = self.pos;
        if depth + 1 > MAX_NESTING {
            return Err(self.error(open, format!("nesting deeper than {MAX_NESTING} levels")));
        }
        self.pos += 1;
        self.skip_space();
        let inner = self.alternatives(depth + 1)?;
        if self.peek() != Some(')') {
            return Err(self.error(open, "unterminated group: this '(' is never closed"));
        }
        self.pos += 1;
        Ok(inner)
    }

    /// `"..."`.
    fn literal(&mut self) -> Result<Expr, GbnfError> {
        let open = self.pos;
        self.pos += 1;
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(self.error(open, "unterminated string literal")),
                Some('"') => break,
                Some(_) => text.push(self.char()?),
            }
        }
        self.pos += 1;
        Ok(Expr::Literal(text))
    }

    /// `[...]` or `[^...]`: characters and ranges `a-z`. As in llama.cpp, a `-` first, last, or right
    /// after a range is itself a member.
    fn class(&mut self) -> Result<Expr, GbnfError> {
        let open = self.pos;
        self.pos += 1;
        let negated = self.rest().starts_with('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            let at = self.pos;
            match self.peek() {
                None => return Err(self.error(open, "unterminated character class")),
                Some(']') => break,
                Some(_) => {}
            }
            let first = self.char()?;
            let mut last = first;
            let rest = self.rest();
            if rest.len() > 1 && rest.starts_with('-') && !rest[1..].starts_with(']') {
                self.pos += 1;
                last = self.char()?;
                if last < first {
                    return Err(self.error(at, format!("range {first:?}-{last:?} ends before it starts")));
                }
            }
            ranges.push((first, last));
        }
        self.pos += 1;
        if ranges.is_empty() {
            return Err(self.error(open, "empty character class"));
        }
        Ok(Expr::Class { negated, ranges })
    }

    /// One character of a literal or class, escapes decoded. The caller checked that one follows.
    fn char(&mut self) -> Result<char, GbnfError> {
        let at = self.pos;
        let c = self.bump().unwrap_or_default();
        if c != '\\' {
            return Ok(c);
        }
        let hex_digits = match self.bump() {
            Some('n') => return Ok('\n'),
            Some('r') => return Ok('\r'),
            Some('t') => return Ok('\t'),
            Some(c @ ('\\' | '"' | '[' | ']' | '-')) => return Ok(c),
            Some('x') => 2,
            Some('u') => 4,
            Some('U') => 8,
            Some(c) => return Err(self.error(at, format!("unknown escape '\\{c}'"))),
            None => return Err(self.error(at, "unterminated escape at the end of the grammar")),
        };
        let digits = self.rest().get(..hex_digits).filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(digits) = digits else {
            let kind = &self.src[at..at + 2];
            return Err(self.error(at, format!("'{kind}' needs {hex_digits} hex digits")));
        };
        self.pos += hex_digits;
        // Eight hex digits fit a u32; not every u32 is a character.
        let value = u32::from_str_radix(digits, 16).unwrap_or(u32::MAX);
        char::from_u32(value)
            .ok_or_else(|| self.error(at, format!("'{}' is not a Unicode character", &self.src[at..self.pos])))
    }

    /// `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}`, as (min, max).
    fn repetition(&mut self) -> Result<(u32, Option<u32>), GbnfError> {
        let at = self.pos;
        match self.bump() {
            Some('*') => return Ok((0, None)),
            Some('+') => return Ok((1, None)),
            Some('?') => return Ok((0, Some(1))),
            _ => {}
        }
        self.skip_space();
        let min = self.count()?;
        self.skip_space();
        let max = match self.bump() {
            Some('}') => Some(min),
            Some(',') => {
                self.skip_space();
                let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) { Some(self.count()?) } else { None };
                self.skip_space();
                if self.bump() != Some('}') {
                    return Err(self.error(at, "unterminated repetition: expected '}'"));
                }
                max
            }
            _ => return Err(self.error(at, "unterminated repetition: expected ',' or '}'")),
        };
        if let Some(max) = max.filter(|&max| max < min) {
            return Err(self.error(at, format!("repetition {{{min},{max}}}: the minimum exceeds the maximum")));
        }
        Ok((min, max))
    }

    /// A repetition count: decimal digits, at most MAX_REPEAT.
    fn count(&mut self) -> Result<u32, GbnfError> {
        let at = self.pos;
        let digits = self.rest().find(|c: char| !c.is_ascii_digit()).unwrap_or(self.rest().len());
        if digits == 0 {
            return Err(self.error(at, "expected a repetition count"));
        }
        self.pos += digits;
        match self.src[at..self.pos].parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(n),
            _ => Err(self.error(at, format!("repetition count above the limit of {MAX_REPEAT}"))),
        }
    }

    /// A tokenizer token: `<[id]>` or `<text>`, negated by a leading `!`.
    fn token(&mut self) -> Result<Expr, GbnfError> {
        let at = self.pos;
        let negated = self.rest().starts_with('!');
        if negated {
            self.pos += 1;
            if !self.rest().starts_with('<') {
                return Err(self.error(at, "expected '<' after '!'"));
            }
        }
        let Some(len) = self.rest().find('>') else {
            return Err(self.error(at, "unterminated token: expected '>'"));
        };
        let text = &self.rest()[..=len];
        self.pos += len + 1;
        let inner = &text[1..len];
        if let Some(id) = inner.strip_prefix('[') {
            let id = id.strip_suffix(']').filter(|id| id.bytes().all(|b| b.is_ascii_digit()));
            let Some(id) = id.filter(|id| id.parse::<u32>().is_ok()) else {
                return Err(self.error(at, format!("token {text:?}: expected <[id]> with a number below 2^32")));
            };
            return Ok(Expr::Token(format!("<[{}{id}]>", if negated { "^" } else { "" })));
        }
        if negated {
            return Err(self.error(at, "a negated token must be given by id, as !<[id]>, for llguidance"));
        }
        if inner.is_empty() || inner.contains(|c: char| c.is_whitespace() || c == '<') {
            return Err(self.error(at, format!("token name {text:?} is empty or holds a blank or '<'")));
        }
        Ok(Expr::Token(text.to_string()))
    }
}

/// Line and column (1-based, the column in characters) of byte offset `at`.
fn line_column(src: &str, at: usize) -> (usize, usize) {
    let before = &src[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

fn error_at(src: &str, at: usize, message: String) -> GbnfError {
    let (line, column) = line_column(src, at);
    GbnfError { line, column, message }
}

/// The Lark names of the rules (`rules`' order), and the namer that picked them. Checks that `root`
/// exists, that every rule is defined once and every reference names one, and decides which rules
/// become terminals.
fn resolve(src: &str, rules: &[Rule]) -> Result<(Vec<LarkName>, Namer), GbnfError> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, rule) in rules.iter().enumerate() {
        if let Some(&first) = index.get(rule.name.as_str()) {
            let (line, column) = line_column(src, rules[first].at);
            let message = format!("rule `{}` is already defined at line {line}, column {column}", rule.name);
            return Err(error_at(src, rule.at, message));
        }
        index.insert(&rule.name, i);
    }
    // What each rule holds: its references in text order (the first undefined one is an error).
    let mut bodies: Vec<Body> = Vec::with_capacity(rules.len());
    for rule in rules {
        let mut body = Body { refs: Vec::new(), nesting: 0, has_token: false };
        let mut found = Vec::new();
        walk(&rule.body, 0, &mut found, &mut body);
        for (name, at, depth) in found {
            let Some(&target) = index.get(name) else {
                return Err(error_at(src, at, format!("undefined rule `{name}`")));
            };
            body.refs.push(Reference { target, at, depth });
        }
        bodies.push(body);
    }
    let Some(&root) = index.get("root") else {
        return Err(error_at(src, 0, "no `root` rule: a GBNF grammar starts at `root`".into()));
    };
    check_compile_depth(src, rules, &bodies, root)?;
    let terminal = terminals(&bodies);

    // `start` for the root (a terminal root gets a name of its own, which `start` then refers to), the
    // GBNF name otherwise.
    let mut namer = Namer::default();
    namer.taken.insert("start".into());
    let mut names = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        let name = if i == root && !terminal[i] { "start".into() } else { namer.fresh(&rule.name, terminal[i]) };
        names.push(LarkName { name, terminal: terminal[i], root: i == root });
    }
    Ok((names, namer))
}

/// A rule's name in the Lark output.
struct LarkName {
    name: String,
    terminal: bool,
    root: bool,
}

/// Unique Lark names.
#[derive(Default)]
struct Namer {
    taken: HashSet<String>,
    /// The next suffix to try for a base name that is taken (so that picking names stays linear).
    next_suffix: HashMap<String, u32>,
}

impl Namer {
    /// A name not taken before, from `base`: cased for its kind (Lark's terminals are UPPERCASE, its
    /// rules lowercase), a letter put first where `base` starts with a digit, '-' or '_' (GBNF allows
    /// that, Lark does not), a `_2`, `_3`... suffix where the name is taken.
    fn fresh(&mut self, base: &str, terminal: bool) -> String {
        let prefix = if base.starts_with(|c: char| c.is_ascii_alphabetic()) { "" } else { "r" };
        let base = format!("{prefix}{base}");
        let base = if terminal { base.to_ascii_uppercase() } else { base.to_ascii_lowercase() };
        let mut name = base.clone();
        while self.taken.contains(&name) {
            let n = self.next_suffix.entry(base.clone()).or_insert(2);
            name = format!("{base}_{n}");
            *n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// What `resolve` needs to know of a rule's body.
struct Body {
    refs: Vec<Reference>,
    /// Deepest nesting of alternatives and repetitions in it.
    nesting: usize,
    has_token: bool,
}

/// A reference from one rule to another.
struct Reference {
    /// The rule referred to (its index).
    target: usize,
    /// Byte offset of the reference.
    at: usize,
    /// Alternatives and repetitions around it in its rule.
    depth: usize,
}

/// Walk `expr`, nested `depth` deep in its rule: push its references (name, offset, depth) in text
/// order, and note in `body` how deep it nests and whether it has a token.
fn walk<'e>(expr: &'e Expr, depth: usize, refs: &mut Vec<(&'e str, usize, usize)>, body: &mut Body) {
    body.nesting = body.nesting.max(depth);
    match expr {
        Expr::Literal(_) | Expr::Class { .. } | Expr::Any => {}
        Expr::Token(_) => body.has_token = true,
        Expr::Ref { name, at } => refs.push((name, *at, depth)),
        Expr::Seq(items) => items.iter().for_each(|e| walk(e, depth, refs, body)),
        Expr::Alt(items) => items.iter().for_each(|e| walk(e, depth + 1, refs, body)),
        Expr::Repeat { item, .. } => walk(item, depth + 1, refs, body),
    }
}

/// Refuse a grammar that would take llguidance's compiler deeper than MAX_COMPILE_DEPTH. Walk the rules
/// as it compiles them: depth first from the root, each rule where the first reference to it is met,
/// in text order. Along the walk's path, each reference counts 1 plus the nesting around it, and the
/// last rule its own nesting.
fn check_compile_depth(src: &str, rules: &[Rule], bodies: &[Body], root: usize) -> Result<(), GbnfError> {
    let too_deep = |at: usize| {
        let message = format!(
            "groups and references to rules nest more than {MAX_COMPILE_DEPTH} deep, more than llguidance \
             compiles safely"
        );
        Err(error_at(src, at, message))
    };
    if bodies[root].nesting > MAX_COMPILE_DEPTH {
        return too_deep(rules[root].at);
    }
    let mut visited = vec![false; bodies.len()];
    visited[root] = true;
    // The walk's path: (rule, its next reference to follow, depth of the path up to the rule).
    let mut path = vec![(root, 0, 0)];
    while let Some(top) = path.last_mut() {
        let (rule, next, depth) = *top;
        let Some(reference) = bodies[rule].refs.get(next) else {
            path.pop();
            continue;
        };
        top.1 += 1;
        if visited[reference.target] {
            continue;
        }
        visited[reference.target] = true;
        let depth = depth + 1 + reference.depth;
        if depth + bodies[reference.target].nesting > MAX_COMPILE_DEPTH {
            return too_deep(reference.at);
        }
        path.push((reference.target, 0, depth));
    }
    Ok(())
}

/// Which rules can be terminals: those without tokens whose references are all terminals, so never a
/// rule on a cycle (terminals are regular expressions). The least fixed point, found by counting each
/// rule's references not yet known to be terminals (linear, no recursion).
fn terminals(bodies: &[Body]) -> Vec<bool> {
    let targets: Vec<Vec<usize>> = bodies
        .iter()
        .map(|body| {
            let mut targets: Vec<usize> = body.refs.iter().map(|r| r.target).collect();
            targets.sort_unstable();
            targets.dedup();
            targets
        })
        .collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); bodies.len()];
    for (user, targets) in targets.iter().enumerate() {
        for &t in targets {
            users[t].push(user);
        }
    }
    let mut pending: Vec<usize> = targets.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..bodies.len()).filter(|&i| pending[i] == 0 && !bodies[i].has_token).collect();
    let mut terminal = vec![false; bodies.len()];
    while let Some(i) = ready.pop() {
        terminal[i] = true;
        for &user in &users[i] {
            pending[user] -= 1;
            if pending[user] == 0 && !bodies[user].has_token {
                ready.push(user);
            }
        }
    }
    terminal
}

/// Deepest parentheses in one Lark rule. llguidance's Lark parser refuses more than about 30 levels
/// (its own stack guard); a group deeper than this becomes a rule of its own.
const MAX_LARK_PARENS: usize = 16;

/// The Lark text: one line per rule, in the GBNF order, each followed by the rules split off it.
fn emit(rules: &[Rule], names: &[LarkName], namer: Namer) -> String {
    let lark_names = rules.iter().zip(names).map(|(r, n)| (r.name.as_str(), n.name.as_str())).collect();
    let mut writer = Writer { out: String::from("%llguidance {}\n\n"), lark_names, namer, split: Vec::new() };
    for (rule, name) in rules.iter().zip(names) {
        if name.root && name.terminal {
            let _ = writeln!(writer.out, "start: {}", name.name);
        }
        writer.split.push((name.name.clone(), &rule.body));
        let mut next = 0;
        while let Some((lark_name, body)) = writer.split.get(next).cloned() {
            writer.out.push_str(&lark_name);
            writer.out.push_str(": ");
            writer.expr(body, Prec::Alt, 0, (&name.name, name.terminal));
            writer.out.push('\n');
            next += 1;
        }
        writer.split.clear();
    }
    writer.out
}

/// How tightly an expression binds, loosest first: where a context needs a tighter one, it is
/// parenthesized.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Prec {
    Alt,
    Seq,
    /// An item with a repetition operator after it.
    Postfix,
    Atom,
}

struct Writer<'a> {
    out: String,
    /// GBNF rule name -> Lark name, for every rule (so for every reference: resolve checked them).
    lark_names: HashMap<&'a str, &'a str>,
    namer: Namer,
    /// The current rule and the groups split off it, as (Lark name, body), to be written in order.
    split: Vec<(String, &'a Expr)>,
}

impl<'a> Writer<'a> {
    /// Write `expr` where `context` binds, inside `parens` parentheses of a rule that is `owner`
    /// (Lark name, whether a terminal).
    fn expr(&mut self, expr: &'a Expr, context: Prec, parens: usize, owner: (&str, bool)) {
        // Lark refuses a repetition of at most zero (`x{0}`); and a repetition of the empty string needs
        // no loop in the grammar.
        if matches!(expr, Expr::Seq(_) | Expr::Repeat { .. }) && is_empty(expr) {
            self.out.push_str("\"\"");
            return;
        }
        let prec = match expr {
            Expr::Alt(_) => Prec::Alt,
            Expr::Seq(_) => Prec::Seq,
            Expr::Repeat { min: 1, max: Some(1), item } => return self.expr(item, context, parens, owner),
            Expr::Repeat { .. } => Prec::Postfix,
            _ => Prec::Atom,
        };
        let parenthesize = prec < context;
        if parenthesize && parens == MAX_LARK_PARENS {
            // A rule of the owner's kind means the same: a terminal's terminals are inlined into it,
            // and a rule is a group with a name.
            let name = self.namer.fresh(&format!("{}-g", owner.0), owner.1);
            self.out.push_str(&name);
            self.split.push((name, expr));
            return;
        }
        let parens = parens + usize::from(parenthesize);
        if parenthesize {
            self.out.push('(');
        }
        match expr {
            Expr::Literal(text) => write_literal(&mut self.out, text),
            Expr::Class { negated, ranges } => {
                self.out.push_str(if *negated { "/[^" } else { "/[" });
                for &(first, last) in ranges {
                    write_class_char(&mut self.out, first);
                    if last != first {
                        self.out.push('-');
                        write_class_char(&mut self.out, last);
                    }
                }
                self.out.push_str("]/");
            }
            Expr::Any => self.out.push_str("/(?s:.)/"),
            Expr::Token(token) => self.out.push_str(token),
            Expr::Ref { name, .. } => {
                let lark_name = self.lark_names.get(name.as_str()).copied().unwrap_or(name);
                self.out.push_str(lark_name);
            }
            Expr::Seq(items) | Expr::Alt(items) => {
                let (separator, inner) = if prec == Prec::Alt { (" | ", Prec::Seq) } else { (" ", Prec::Postfix) };
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(separator);
                    }
                    self.expr(item, inner, parens, owner);
                }
            }
            Expr::Repeat { item, min, max } => {
                self.expr(item, Prec::Atom, parens, owner);
                let _ = match (min, max) {
                    (0, None) => write!(self.out, "*"),
                    (1, None) => write!(self.out, "+"),
                    (0, Some(1)) => write!(self.out, "?"),
                    (m, None) => write!(self.out, "{{{m},}}"),
                    (m, Some(n)) if m == n => write!(self.out, "{{{m}}}"),
                    (m, Some(n)) => write!(self.out, "{{{m},{n}}}"),
                };
            }
        }
        if parenthesize {
            self.out.push(')');
        }
    }
}

/// Whether `expr` is written as `""`, because all it matches is the empty string.
fn is_empty(expr: &Expr) -> bool {
    match expr {
        Expr::Literal(text) => text.is_empty(),
        Expr::Seq(items) => items.is_empty(),
        Expr::Repeat { item, max, .. } => *max == Some(0) || is_empty(item),
        _ => false,
    }
}

/// A Lark string literal. Lark reads it as a JSON string (plus `\xHH`): quote, backslash and control
/// characters need escapes; every other character is written as itself.
fn write_literal(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // All control and blank characters are in the BMP: one \uXXXX each.
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One character inside a regex class `[...]`, itself inside Lark's `/.../`: the class syntax of the
/// regex crate (`\ [ ] ^ -`, and `& ~` that double as set operators) and Lark's delimiter `/` are
/// escaped, invisible characters written by code point.
fn write_class_char(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\\' | '[' | ']' | '^' | '-' | '&' | '~' | '/' => {
            out.push('\\');
            out.push(c);
        }
        ' ' => out.push(' '),
        c if c.is_control() || c.is_whitespace() => {
            let _ = write!(out, "\\x{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    use llguidance::api::TopLevelGrammar;
    use llguidance::toktrie::ApproximateTokEnv;
    use llguidance::{Matcher, ParserFactory};

    const HEADER: &str = "%llguidance {}\n\n";

    /// The Lark rules of a grammar, without the header.
    fn lark(gbnf: &str) -> String {
        let lark = gbnf_to_lark(gbnf).unwrap_or_else(|e| panic!("{gbnf:?}: {e}"));
        lark.strip_prefix(HEADER).unwrap_or_else(|| panic!("no header: {lark}")).to_string()
    }

    /// The Lark body of `root ::= {body}`: what follows `ROOT: ` (or `start: ` when the root is no terminal).
    fn body(body: &str) -> String {
        let lark = lark(&format!("root ::= {body}"));
        let last = lark.lines().last().unwrap_or_default();
        last.split_once(": ").map_or(String::new(), |(_, body)| body.to_string())
    }

    /// llguidance over a tokenizer of one token per byte (ids 0..=255) and a few special tokens, such as
    /// `<|tool|>` (256).
    fn compile(lark: &str) -> Result<Matcher, String> {
        let mut factory =
            ParserFactory::new_simple(&ApproximateTokEnv::single_byte_env()).map_err(|e| e.to_string())?;
        factory.quiet();
        let parser = factory.create_parser(TopLevelGrammar::from_lark(lark.to_string())).map_err(|e| e.to_string())?;
        Ok(Matcher::new(Ok(parser)))
    }

    /// Whether the grammar takes these tokens, whole: each allowed by the mask, then the end allowed.
    fn accepts_tokens(matcher: &mut Matcher, tokens: &[u32]) -> bool {
        for &token in tokens {
            let Ok(mask) = matcher.compute_mask_or_eos() else { return false };
            if !mask.is_allowed(token) || matcher.consume_token(token).is_err() {
                return false;
            }
        }
        matcher.is_accepting().unwrap_or(false)
    }

    fn accepts(lark: &str, text: &str) -> bool {
        let mut matcher = compile(lark).unwrap_or_else(|e| panic!("llguidance refused it: {e}\n{lark}"));
        accepts_tokens(&mut matcher, &text.bytes().map(u32::from).collect::<Vec<_>>())
    }

    /// Translate, compile, and check what llguidance takes and refuses.
    fn check(gbnf: &str, good: &[&str], bad: &[&str]) {
        let lark = gbnf_to_lark(gbnf).unwrap_or_else(|e| panic!("{gbnf:?}: {e}"));
        for text in good {
            assert!(accepts(&lark, text), "refused {text:?}\n{lark}");
        }
        for text in bad {
            assert!(!accepts(&lark, text), "accepted {text:?}\n{lark}");
        }
    }

    #[test]
    fn literals_and_escapes() {
        assert_eq!(body(r#""ab c""#), r#""ab c""#);
        assert_eq!(body(r#""\n\r\t\\\"\[\]\-""#), r#""\n\r\t\\\"[]-""#);
        assert_eq!(body(r#""\x41\u00e9\U0001F600""#), r#""Aé😀""#);
        // Lark reads a literal as a JSON string: control characters by code point; blanks too, but ' '.
        assert_eq!(body(r#""\x00\x1b\x7f\u0085\u2028 ""#), r#""\u0000\u001b\u007f\u0085\u2028 ""#);
        // Any character but '"' and '\' stands for itself, a newline too.
        assert_eq!(body("\"two\nlines\""), r#""two\nlines""#);
        assert_eq!(body(r#""""#), r#""""#);
        check(r#"root ::= "a\n\"\\\x41é😀" "\u0000""#, &["a\n\"\\Aé😀\0"], &["a\n\"\\Aé😀", "a"]);
    }

    #[test]
    fn character_classes() {
        assert_eq!(body("[a-z0-9_]"), "/[a-z0-9_]/");
        assert_eq!(body(r#"[^"\\\x7F\x00-\x1F]"#), r#"/[^"\\\x{7f}\x{0}-\x{1f}]/"#);
        assert_eq!(body("[ぁ-ゟ]"), "/[ぁ-ゟ]/");
        assert_eq!(body(r"[ \t\n\r\u2028]"), r"/[ \t\n\r\x{2028}]/");
        // As in llama.cpp, '-' first, last, or after a range is a member; an escaped one is a member too.
        assert_eq!(body("[-a-c-]"), r"/[\-a-c\-]/");
        assert_eq!(body(r"[a\-z]"), r"/[a\-z]/");
        // The regex class syntax and Lark's '/' escaped; the rest of ASCII as itself.
        assert_eq!(body(r"[/^&~\[\]\\]"), r"/[\/\^\&\~\[\]\\]/");
        assert_eq!(body(r##"[!"#$%'()*+,.:;<=>?@_`{|}]"##), r##"/[!"#$%'()*+,.:;<=>?@_`{|}]/"##);
        assert_eq!(body("."), "/(?s:.)/");
        check(r#"root ::= [^"\\\x7F\x00-\x1F]+"#, &["abc é\u{85}"], &["a\"", "a\\", "a\x7f", "\n", ""]);
        check(r"root ::= [/^&~\[\]\\<>-]", &["/", "^", "&", "~", "[", "]", "\\", "<", ">", "-"], &["a", ""]);
        check("root ::= [ぁ-ゟ] [-a-c-]", &["ぁa", "ゟ-", "あc"], &["ぁd", "ァa"]);
        // `.` and negated classes take any character, newline included, as in llama.cpp.
        check(r#"root ::= "a" . [^x] "b""#, &["a\n\nb", "aéyb", "a.!b"], &["ab", "axxb", "a\nxb"]);
    }

    #[test]
    fn repetitions() {
        assert_eq!(
            body(r#""a"* "b"+ "c"? "d"{3} "e"{2,} "f"{2,5} "g"{0} "h"{1} "i"{0,1} "j"{1,} "k"{ 0 , 2 }"#),
            r#""a"* "b"+ "c"? "d"{3} "e"{2,} "f"{2,5} "" "h" "i"? "j"+ "k"{0,2}"#
        );
        // Operators stack, as in llama.cpp; Lark takes one per item, hence the parentheses.
        assert_eq!(body(r#""a"*? "b"+{2}"#), r#"("a"*)? ("b"+){2}"#);
        assert_eq!(body(r#"("a" "b")* ("c" | "d")+ ("e"){2}"#), r#"("a" "b")* ("c" | "d")+ "e"{2}"#);
        // Repeating nothing is nothing.
        assert_eq!(body(r#"()* ("")+ "b"{0,0} ("c" "")*"#), r#""" "" "" ("c" "")*"#);
        check(
            r#"root ::= "a"{3} "b"{2,} "c"{1,2} "d"{0} "e"?"#,
            &["aaabbc", "aaabbbbcce"],
            &["aabbc", "aaabc", "aaabbccc", "aaabbcd", "aaabbcee"],
        );
        check(r#"root ::= ("a" "b")*? "c""#, &["c", "abc", "ababc"], &["ac", "abac"]);
    }

    #[test]
    fn groups_and_alternatives() {
        assert_eq!(body(r#"((("a")))"#), r#""a""#);
        assert_eq!(body(r#""a" ("b" "c") "d""#), r#""a" "b" "c" "d""#);
        assert_eq!(body(r#""a" | ("b" | "c")"#), r#""a" | "b" | "c""#);
        // The empty alternative, here and in a group.
        assert_eq!(body(r#"| "a" | ("b" |) "d""#), r#""" | "a" | ("b" | "") "d""#);
        check(r#"root ::= | "a" ("b" |) "c""#, &["", "ac", "abc"], &["a", "bc"]);
        check(r#"root ::= "(" root ")" | "x""#, &["x", "((x))"], &["", "(x", "(x))"]);
        check(r#"root ::= """#, &[""], &["a"]);
        check("root ::=", &[""], &["a"]);
    }

    #[test]
    fn comments_and_lines() {
        let gbnf = "# a comment\n\nroot ::= item # trailing\n  ( \"x\" # inside\n  | \"y\" )\n  | \"z\"\n\nitem ::=\n  \"i\"\r\n# end";
        // Outside parentheses too, a rule goes on to the next `name ::=` (llama.cpp ends it at the newline).
        assert_eq!(lark(gbnf), "start: ROOT\nROOT: ITEM (\"x\" | \"y\") | \"z\"\nITEM: \"i\"\n");
        // A byte-order mark is skipped.
        assert_eq!(lark("\u{feff}root ::= \"a\""), "start: ROOT\nROOT: \"a\"\n");
    }

    #[test]
    fn terminals_are_the_rules_without_recursion_or_tokens() {
        let gbnf = r#"
            root   ::= expr
            expr   ::= term ("+" term)*
            term   ::= num | "(" expr ")"
            num    ::= digit+ ws
            digit  ::= [0-9]
            ws     ::= [ ]*
            marked ::= "<" <[7]> ">"
        "#;
        assert_eq!(
            lark(gbnf),
            "start: expr\nexpr: term (\"+\" term)*\nterm: NUM | \"(\" expr \")\"\nNUM: DIGIT+ WS\n\
             DIGIT: /[0-9]/\nWS: /[ ]/*\nmarked: \"<\" <[7]> \">\"\n"
        );
        check(gbnf, &["1", "(12 +3)+4 "], &["", "1+", "(1", "1+ 2"]);
    }

    #[test]
    fn names() {
        let gbnf = "root ::= Foo foo 1x -y a_b start tok\nFoo ::= \"a\"\nfoo ::= \"b\"\n1x ::= \"c\"\n-y ::= \"d\"\n\
                    a_b ::= \"e\"\nstart ::= \"f\" start | \"g\"\ntok ::= <[1]>";
        assert_eq!(
            lark(gbnf),
            "start: FOO FOO_2 R1X R-Y A_B start_2 tok\nFOO: \"a\"\nFOO_2: \"b\"\nR1X: \"c\"\nR-Y: \"d\"\nA_B: \"e\"\n\
             start_2: \"f\" start_2 | \"g\"\ntok: <[1]>\n"
        );
        // A rule defined after its use, and one never used.
        check("root ::= later-rule\nunused ::= \"u\"\nlater-rule ::= \"x\" | \"y\"", &["x", "y"], &["u"]);
    }

    #[test]
    fn tokens() {
        assert_eq!(body("<[12]> !<[12]> <|tool|> <think>"), "<[12]> <[^12]> <|tool|> <think>");
        let lark = gbnf_to_lark(r#"root ::= <|tool|> "x" !<[120]>*"#).unwrap();
        let mut matcher = compile(&lark).unwrap_or_else(|e| panic!("{e}\n{lark}"));
        // 256 is the test tokenizer's <|tool|>; 120 is "x".
        assert!(accepts_tokens(&mut matcher, &[256, 120, 121, 122]), "{lark}");
        let mut matcher = compile(&lark).unwrap();
        assert!(!accepts_tokens(&mut matcher, &[256, 120, 121, 120]), "{lark}");
    }

    /// A known difference from llama.cpp: llguidance lexes greedily, so a terminal does not stop where the
    /// next one could start with the same text. llama.cpp takes "12" here (`num` = "1", then "2").
    #[test]
    fn terminals_match_greedily() {
        check("root ::= num num | \"(\" root \")\"\nnum ::= [0-9]+", &[], &["12", "(12)"]);
    }

    #[test]
    fn errors_have_positions() {
        let deep = format!("root ::= {}\"a\"{}", "(".repeat(MAX_NESTING + 1), ")".repeat(MAX_NESTING + 1));
        let stacked = format!("root ::= \"a\"{}", "?".repeat(MAX_NESTING + 1));
        let cases: &[(&str, usize, usize, &str)] = &[
            ("root ::= foo", 1, 10, "undefined rule `foo`"),
            ("root ::= \"a\"\nx ::= y", 2, 7, "undefined rule `y`"),
            ("a ::= \"x\"", 1, 1, "no `root` rule"),
            ("", 1, 1, "no `root` rule"),
            ("root ::= \"a\"\nroot ::= \"b\"", 2, 1, "`root` is already defined at line 1, column 1"),
            ("root ::= \"abc", 1, 10, "unterminated string literal"),
            ("root ::= [abc", 1, 10, "unterminated character class"),
            (r"root ::= [a\]", 1, 10, "unterminated character class"),
            ("root ::= (\n  \"a\" \"b\"\n", 1, 10, "unterminated group"),
            ("root ::= (\"a\" | (\"b\")\nx ::= \"c\"", 1, 10, "unterminated group"),
            ("root ::= \"a\")", 1, 13, "')' without a matching '('"),
            (r#"root ::= "\q""#, 1, 11, r"unknown escape '\q'"),
            (r#"root ::= "\x4""#, 1, 11, r"'\x' needs 2 hex digits"),
            (r"root ::= [\uD800]", 1, 11, r"'\uD800' is not a Unicode character"),
            (r#"root ::= "\U00110000""#, 1, 11, r"'\U00110000' is not a Unicode character"),
            ("root ::= \"\\", 1, 11, "unterminated escape"),
            ("root ::= \"a\"{3,2}", 1, 13, "the minimum exceeds the maximum"),
            ("root ::= \"a\"{10001}", 1, 14, "above the limit of 10000"),
            ("root ::= \"a\"{1,99999999999999999999}", 1, 16, "above the limit of 10000"),
            ("root ::= \"a\"{", 1, 14, "expected a repetition count"),
            ("root ::= \"a\"{1,2", 1, 13, "expected '}'"),
            ("root ::= \"a\"{1 x}", 1, 13, "expected ',' or '}'"),
            ("root ::= *", 1, 10, "'*' with nothing before it to repeat"),
            ("root ::= \"a\" | +\"b\"", 1, 16, "'+' with nothing before it"),
            ("root ::= []", 1, 10, "empty character class"),
            ("root ::= [^]", 1, 10, "empty character class"),
            ("root ::= [z-a]", 1, 11, "ends before it starts"),
            ("root = \"a\"", 1, 6, "expected '::=' after the rule name `root`"),
            ("\"a\" ::= \"b\"", 1, 1, "expected a rule name"),
            ("root ::= \"a\" b ::= \"c\"", 1, 14, "expected a newline before the next rule"),
            ("root ::= b ::= \"c\"", 1, 10, "expected a newline before the next rule"),
            ("root ::= \"a\" ; \"b\"", 1, 14, "unexpected character ';'"),
            ("root ::= \"é\" ]", 1, 14, "unexpected character ']'"),
            ("root ::= \"a\"\n  ::= \"b\"", 2, 3, "unexpected character ':'"),
            ("root ::= !<think>", 1, 10, "negated token must be given by id"),
            ("root ::= <[12x]>", 1, 10, "expected <[id]>"),
            ("root ::= <[4294967296]>", 1, 10, "expected <[id]>"),
            ("root ::= <a b>", 1, 10, "holds a blank"),
            ("root ::= <>", 1, 10, "is empty"),
            ("root ::= <abc", 1, 10, "unterminated token"),
            ("root ::= !x", 1, 10, "expected '<' after '!'"),
            (&deep, 1, 10 + MAX_NESTING, "nesting deeper than 200 levels"),
            (&stacked, 1, 13 + MAX_NESTING, "nesting deeper than 200 levels"),
        ];
        for &(gbnf, line, column, message) in cases {
            let e = gbnf_to_lark(gbnf).expect_err(gbnf);
            assert_eq!((e.line, e.column), (line, column), "{gbnf:?}: {e}");
            assert!(e.message.contains(message), "{gbnf:?}: {e}");
            assert_eq!(e.to_string(), format!("line {line}, column {column}: {}", e.message));
        }
    }

    /// Run `f` on a stack of 1 MiB, a wasm32 module's whole stack: natively in a thread of that size, on
    /// wasm32 on the module's own.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        #[cfg(not(target_arch = "wasm32"))]
        return std::thread::Builder::new().stack_size(1 << 20).spawn(f).unwrap().join().unwrap();
        #[cfg(target_arch = "wasm32")]
        return f();
    }

    /// The deepest nesting allowed translates, and llguidance compiles it on a small stack: groups deeper
    /// than its Lark parser takes are split off into rules of their own.
    #[test]
    fn deepest_nesting_compiles() {
        let nested = |inner: &str| format!("root ::= {}{inner}{}", "(".repeat(MAX_NESTING), ")*".repeat(MAX_NESTING));
        // A token keeps the root from being a terminal: token 98 is "b".
        let lark = gbnf_to_lark(&nested("\"a\" <[98]>")).unwrap();
        assert!(lark.contains("\nstart-g: ") && lark.contains("\nstart-g_2: "), "{lark}");
        on_small_stack(move || {
            assert!(accepts(&lark, "ab") && accepts(&lark, "abab") && !accepts(&lark, "aba"), "{lark}");
        });
        // The same in a terminal: its split-off groups are terminals.
        let lark = gbnf_to_lark(&nested("\"a\" [b]")).unwrap();
        assert!(lark.contains("\nROOT-G: "), "{lark}");
        on_small_stack(move || {
            assert!(accepts(&lark, "ab") && accepts(&lark, "ababab") && !accepts(&lark, "aba"), "{lark}");
        });
        let stacked = gbnf_to_lark(&format!("root ::= \"a\"{}", "?".repeat(MAX_NESTING))).unwrap();
        on_small_stack(move || assert!(accepts(&stacked, "a")));
    }

    /// The translation's recursion fits a small stack (a wasm32 module has 1 MiB in all) at the deepest
    /// nesting allowed, and refuses deeper nesting before it recurses further.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn deep_nesting_fits_a_small_stack() {
        let translate = |depth: usize| {
            let gbnf = format!("root ::= {}\"a\"{}", "(".repeat(depth), ")*".repeat(depth));
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || gbnf_to_lark(&gbnf).map(|_| ()))
                .unwrap()
                .join()
                .unwrap()
        };
        assert!(translate(MAX_NESTING).is_ok());
        assert!(translate(100_000).is_err());
    }

    /// `root` and a chain of `n` rules, each referring to the next inside `groups` repetitions; with
    /// `cycle`, each may also go back to the first (so none is a terminal).
    fn chain(n: usize, groups: usize, cycle: bool) -> String {
        let mut gbnf = String::from("root ::= r0\n");
        for i in 0..n {
            let next = format!("{}\"a\" r{}{}", "(".repeat(groups), i + 1, ")?".repeat(groups));
            gbnf.push_str(&format!("r{i} ::= {next}{}\n", if cycle { " | r0" } else { "" }));
        }
        gbnf + &format!("r{n} ::= \"b\"\n")
    }

    /// llguidance compiles chains of rules recursively: at MAX_COMPILE_DEPTH they still compile with a
    /// stack of 1 MiB (a wasm32 module's whole stack), terminals or not, with groups around the
    /// references or not; one level more is refused.
    #[test]
    fn chains_of_rules_at_the_limit_compile() {
        // (groups around each reference, whether the rules cycle): its depth in the chain
        for (groups, cycle) in [(0, false), (0, true), (3, true), (20, false), (40, true)] {
            let weight = 1 + groups + usize::from(cycle);
            let n = (MAX_COMPILE_DEPTH - 1) / weight;
            let deepest = chain(n, groups, cycle);
            let lark = gbnf_to_lark(&deepest).unwrap_or_else(|e| panic!("{groups} {cycle}: {e}"));
            let compiled = on_small_stack(move || compile(&lark).map(|_| ()));
            assert!(compiled.is_ok(), "{groups} {cycle}: {compiled:?}");
            let e = gbnf_to_lark(&chain(n + 1, groups, cycle)).expect_err("one level too deep");
            assert!(e.message.contains("nest more than 200 deep"), "{e}");
        }
    }

    /// A random GBNF expression over the rules `root`, `a` and `b-c`, nested at most `depth` deep.
    fn random_expr(rng: &mut Rng, depth: usize) -> String {
        const ATOMS: &[&str] = &[
            r#""x""#,
            r#""""#,
            r#""\n\"\\\x41é\u2028/""#,
            "[a-c]",
            r"[^\]\-x]",
            r"[/^&~\[\]\\<>]",
            r"[é-ê\t]",
            ".",
            "root",
            "a",
            "b-c",
            "<[3]>",
            "!<[4]>",
            "<|tool|>",
        ];
        const OPS: &[&str] = &["*", "+", "?", "{2}", "{1,3}", "{0,}", "{0}", "{2,}", "{0,1}"];
        let pick = |rng: &mut Rng, n: usize| rng.next_u64() as usize % n;
        let mut expr = match pick(rng, 4) {
            0 if depth > 0 => {
                let n = 1 + pick(rng, 3);
                let alternatives: Vec<String> = (0..n).map(|_| random_expr(rng, depth - 1)).collect();
                format!("({})", alternatives.join(" | "))
            }
            1 if depth > 0 => (0..1 + pick(rng, 3)).map(|_| random_expr(rng, depth - 1)).collect::<Vec<_>>().join(" "),
            _ => ATOMS[pick(rng, ATOMS.len())].to_string(),
        };
        if pick(rng, 3) == 0 {
            expr = format!("({expr}){}", OPS[pick(rng, OPS.len())]);
        }
        expr
    }

    /// Random grammars, most valid, some with a character or two changed: the translation never panics,
    /// and whatever it translates, llguidance compiles.
    #[test]
    fn random_grammars() {
        const NOISE: &[&str] =
            &["(", ")", "|", "\"", "[", "]", "\\", "{", "}", ",", "*", "\n", " ", "::=", "#", "-", "<"];
        let mut rng = Rng::new(37);
        let mut translated = 0;
        for _ in 0..2000 {
            let mut gbnf = String::new();
            for name in ["root", "a", "b-c"] {
                let n = 1 + rng.next_u64() as usize % 3;
                let alternatives: Vec<String> = (0..n).map(|_| random_expr(&mut rng, 3)).collect();
                gbnf.push_str(&format!("{name} ::= {}\n", alternatives.join(" | ")));
            }
            let changes = rng.next_u64() % 3;
            for _ in 0..changes {
                let chars: Vec<(usize, char)> = gbnf.char_indices().collect();
                let (at, c) = chars[rng.next_u64() as usize % chars.len()];
                match rng.next_u64() % 2 {
                    0 => gbnf.insert_str(at, NOISE[rng.next_u64() as usize % NOISE.len()]),
                    _ => drop(gbnf.drain(at..at + c.len_utf8())),
                }
            }
            let lark = gbnf_to_lark(&gbnf);
            assert!(changes > 0 || lark.is_ok(), "{gbnf:?}: {lark:?}");
            if let Ok(lark) = lark {
                translated += 1;
                // A token name is the tokenizer's business: the noise may misspell one.
                match compile(&lark) {
                    Err(e) if !e.contains("unknown special token") => {
                        panic!("llguidance refused the translation of {gbnf:?}: {e}\n{lark}")
                    }
                    _ => {}
                }
            }
        }
        assert!(translated > 800, "only {translated} of the random grammars translated");
    }
}
