//! A check, before any render, that a template cannot make a value that holds itself or nests without
//! bound.
//!
//! minijinja's values are immutable except namespaces (`{% set ns.x = ... %}`) and the loop object
//! (`loop.changed(x)` keeps `x`). A cycle needs one of those objects stored inside itself; nesting that
//! grows a level per step needs a value read back out of one and wrapped in a new list, map or object that
//! is stored again (`{% set ns.l = [ns.l] %}` in a loop). Printing, comparing or freeing such a value
//! recurses once per level, and a cycle forever, which overflows the stack (a crash no fuel limit can stop:
//! the recursion happens inside one step). So the template is refused if:
//! - a namespace or loop object can be stored anywhere but in a plain variable: in a namespace's
//!   attribute, a list, a map, another namespace, an argument that an object keeps (`loop.changed`,
//!   `cycler`, `joiner`, `dict`); or
//! - a value that may come out of one (an attribute, an item, anything computed from them that can be a
//!   container) can be wrapped in a new container that is kept rather than printed or tested at once.
//!
//! Names are tracked flow-insensitively (one kind per name for the whole template, grown until nothing
//! changes), which is conservative: a template is only refused where the syntax could build such a value.
//! Chat templates in use (the ones in our tests and fuzz seeds: ChatML, Llama 3, Mistral, Qwen 2.5/3,
//! DeepSeek) store only strings, numbers, flags and input items in their namespaces, and pass.

use std::collections::{HashMap, HashSet};

use minijinja::machinery::ast::{self, BinOpKind, CallArg, CallType, Expr, Stmt};
use minijinja::syntax::SyntaxConfig;

/// Refuse `source` if rendering it could make a cyclic or unboundedly nested value; the reason.
pub(super) fn check(source: &str, syntax: SyntaxConfig) -> Result<(), String> {
    let template = minijinja::machinery::parse(source, "chat_template", syntax).map_err(|e| e.to_string())?;
    let mut c = Checker::default();
    c.names.insert("namespace", Kind::OBJECT);
    c.names.insert("loop", Kind::OBJECT);
    c.names.insert("varargs", Kind::STORED);
    c.names.insert("kwargs", Kind::STORED);
    c.collect_macros(std::slice::from_ref(&template));
    // Each pass can only grow the names' kinds (two bits per name), so this ends.
    loop {
        c.grew = false;
        c.stmts(std::slice::from_ref(&template))?;
        if !c.grew {
            return Ok(());
        }
    }
}

/// What a value may be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Kind {
    /// A namespace or a loop object itself: the values a template can change.
    object: bool,
    /// A value read out of one (an attribute or item), or computed from one, which may be a list or map.
    stored: bool,
}

impl Kind {
    const PLAIN: Kind = Kind { object: false, stored: false };
    const OBJECT: Kind = Kind { object: true, stored: false };
    const STORED: Kind = Kind { object: false, stored: true };

    fn join(self, o: Kind) -> Kind {
        Kind { object: self.object || o.object, stored: self.stored || o.stored }
    }

    fn is_plain(self) -> bool {
        self == Kind::PLAIN
    }

    /// What a part of this value (an attribute, an item, a slice) may be: never an object, since no
    /// object is let into anything.
    fn part(self) -> Kind {
        if self.is_plain() {
            Kind::PLAIN
        } else {
            Kind::STORED
        }
    }
}

/// What happens to an expression's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// Used at once: printed, tested, compared, turned into a string or a number.
    Read,
    /// Kept as it is: bound to a name or passed through.
    Keep,
    /// Put inside a new list, map or object that is kept: it must be plain.
    Wrap,
}

/// Filters whose result is a string, number or flag, whatever their input.
const SCALAR_FILTERS: &[&str] = &[
    "abs",
    "bool",
    "capitalize",
    "center",
    "count",
    "e",
    "escape",
    "float",
    "format",
    "indent",
    "int",
    "join",
    "length",
    "lower",
    "pprint",
    "replace",
    "round",
    "safe",
    "string",
    "striptags",
    "title",
    "tojson",
    "trim",
    "truncate",
    "upper",
    "urlencode",
    "wordcount",
];
/// Filters whose result is their input, a part of it or a flat list of its items.
const PART_FILTERS: &[&str] = &[
    "attr",
    "first",
    "last",
    "list",
    "max",
    "min",
    "random",
    "reject",
    "rejectattr",
    "reverse",
    "select",
    "selectattr",
    "sort",
    "sum",
    "unique",
];
/// Filters that may return their input or their argument as they are.
const PASS_FILTERS: &[&str] = &["d", "default"];
/// Methods (minijinja's and minijinja-contrib's Python ones) whose result is a string, number, flag or
/// list of strings.
const SCALAR_METHODS: &[&str] = &[
    "capitalize",
    "count",
    "endswith",
    "find",
    "format",
    "index",
    "isalnum",
    "isalpha",
    "isdigit",
    "islower",
    "isnumeric",
    "isspace",
    "isupper",
    "join",
    "lower",
    "lstrip",
    "replace",
    "rfind",
    "rstrip",
    "split",
    "splitlines",
    "startswith",
    "strip",
    "title",
    "upper",
];
/// The loop object's attributes that are numbers or flags.
const LOOP_SCALARS: &[&str] =
    &["index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0"];

#[derive(Default)]
struct Checker<'a> {
    names: HashMap<&'a str, Kind>,
    /// Each macro's parameter names.
    macros: HashMap<&'a str, Vec<&'a str>>,
    /// Names the template assigns (a `loop` it assigns is not the loop object).
    assigned: HashSet<&'a str>,
    grew: bool,
    /// The line of the statement being checked, for the error.
    line: u16,
}

impl<'a> Checker<'a> {
    fn refuse<T>(&self, what: &str) -> Result<T, String> {
        Err(format!(
            "line {}: {what}: the template could make a value that holds itself or nests without bound, which \
             no render limit can stop",
            self.line
        ))
    }

    fn kind_of(&self, name: &str) -> Kind {
        self.names.get(name).copied().unwrap_or(Kind::PLAIN)
    }

    fn bind(&mut self, name: &'a str, k: Kind) {
        self.assigned.insert(name);
        let old = self.kind_of(name);
        let new = old.join(k);
        if new != old {
            self.names.insert(name, new);
            self.grew = true;
        }
    }

    fn assign(&mut self, target: &'a Expr<'a>, k: Kind) -> Result<(), String> {
        match target {
            Expr::Var(v) => self.bind(v.id, k),
            Expr::Tuple(t) => {
                for item in &t.items {
                    self.assign(item, k)?;
                }
            }
            Expr::GetAttr(a) => {
                self.expr(&a.expr, Use::Read)?;
                if k.object {
                    return self.refuse("a namespace or loop object stored in a namespace");
                }
            }
            _ => {
                self.expr(target, Use::Read)?;
            }
        }
        Ok(())
    }

    fn collect_macros(&mut self, stmts: &'a [Stmt<'a>]) {
        for s in stmts {
            match s {
                Stmt::Template(t) => self.collect_macros(&t.children),
                Stmt::ForLoop(f) => {
                    self.collect_macros(&f.body);
                    self.collect_macros(&f.else_body);
                }
                Stmt::IfCond(i) => {
                    self.collect_macros(&i.true_body);
                    self.collect_macros(&i.false_body);
                }
                Stmt::WithBlock(w) => self.collect_macros(&w.body),
                Stmt::AutoEscape(a) => self.collect_macros(&a.body),
                Stmt::FilterBlock(f) => self.collect_macros(&f.body),
                Stmt::Macro(m) => {
                    let params = m.args.iter().filter_map(|a| if let Expr::Var(v) = a { Some(v.id) } else { None });
                    self.macros.insert(m.name, params.collect());
                    self.collect_macros(&m.body);
                }
                _ => {}
            }
        }
    }

    fn stmts(&mut self, stmts: &'a [Stmt<'a>]) -> Result<(), String> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &'a Stmt<'a>) -> Result<(), String> {
        match s {
            Stmt::Template(t) => self.stmts(&t.children)?,
            Stmt::EmitExpr(e) => {
                self.line = e.span().start_line;
                self.expr(&e.expr, Use::Read)?;
            }
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => {}
            Stmt::ForLoop(f) => {
                self.line = f.span().start_line;
                let items = self.items(&f.iter)?;
                self.assign(&f.target, items)?;
                if let Some(filter) = &f.filter_expr {
                    self.expr(filter, Use::Read)?;
                }
                self.stmts(&f.body)?;
                self.stmts(&f.else_body)?;
            }
            Stmt::IfCond(i) => {
                self.line = i.span().start_line;
                self.expr(&i.expr, Use::Read)?;
                self.stmts(&i.true_body)?;
                self.stmts(&i.false_body)?;
            }
            Stmt::WithBlock(w) => {
                self.line = w.span().start_line;
                for (target, value) in &w.assignments {
                    let k = self.expr(value, Use::Keep)?;
                    self.assign(target, k)?;
                }
                self.stmts(&w.body)?;
            }
            Stmt::Set(set) => {
                self.line = set.span().start_line;
                let k = self.expr(&set.expr, Use::Keep)?;
                self.assign(&set.target, k)?;
            }
            Stmt::SetBlock(set) => {
                self.line = set.span().start_line;
                self.stmts(&set.body)?;
                if let Some(filter) = &set.filter {
                    self.expr(filter, Use::Read)?;
                }
                // The value is the body's output: a string.
                self.assign(&set.target, Kind::PLAIN)?;
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled, Use::Read)?;
                self.stmts(&a.body)?;
            }
            Stmt::FilterBlock(f) => {
                self.expr(&f.filter, Use::Read)?;
                self.stmts(&f.body)?;
            }
            Stmt::Macro(m) => {
                self.line = m.span().start_line;
                self.macro_decl(m)?;
            }
            Stmt::CallBlock(c) => {
                self.line = c.span().start_line;
                self.call(&c.call, Use::Read)?;
                self.macro_decl(&c.macro_decl)?;
            }
            Stmt::Do(d) => {
                self.line = d.span().start_line;
                self.call(&d.call, Use::Read)?;
            }
            // Statements of multi-template features, compiled in only if another crate enables them.
            #[allow(unreachable_patterns)]
            _ => return self.refuse("blocks, imports and includes are not supported"),
        }
        Ok(())
    }

    fn macro_decl(&mut self, m: &'a ast::Macro<'a>) -> Result<(), String> {
        // Defaults bind the last parameters.
        let first_default = m.args.len() - m.defaults.len().min(m.args.len());
        for (param, default) in m.args[first_default..].iter().zip(&m.defaults) {
            let k = self.expr(default, Use::Keep)?;
            self.assign(param, k)?;
        }
        for param in &m.args {
            self.assign(param, Kind::PLAIN)?;
        }
        self.stmts(&m.body)
    }

    /// The kind of the items of a `for` loop's iterable.
    fn items(&mut self, iter: &'a Expr<'a>) -> Result<Kind, String> {
        match iter {
            // The items of a list written out are bound as they are.
            Expr::List(l) => l.items.iter().try_fold(Kind::PLAIN, |k, item| Ok(k.join(self.expr(item, Use::Keep)?))),
            Expr::Tuple(t) => t.items.iter().try_fold(Kind::PLAIN, |k, item| Ok(k.join(self.expr(item, Use::Keep)?))),
            _ => Ok(self.expr(iter, Use::Read)?.part()),
        }
    }

    fn expr(&mut self, e: &'a Expr<'a>, u: Use) -> Result<Kind, String> {
        let k = self.value(e, u)?;
        if u == Use::Wrap && !k.is_plain() {
            return if k.object {
                self.refuse("a namespace or loop object put in a list, map or object")
            } else {
                self.refuse("a value from a namespace or loop put in a new list, map or object that is kept")
            };
        }
        Ok(k)
    }

    /// The kind of `e`'s value, checking the expressions inside it.
    fn value(&mut self, e: &'a Expr<'a>, u: Use) -> Result<Kind, String> {
        // What goes into a new container: checked as `Wrap` unless the container is used at once.
        let inner = if u == Use::Read { Use::Read } else { Use::Wrap };
        Ok(match e {
            Expr::Var(v) => self.kind_of(v.id),
            Expr::Const(_) => Kind::PLAIN,
            Expr::GetAttr(a) => {
                let base = self.expr(&a.expr, Use::Read)?;
                let loop_scalar = matches!(&a.expr, Expr::Var(v) if v.id == "loop")
                    && !self.assigned.contains("loop")
                    && LOOP_SCALARS.contains(&a.name);
                if loop_scalar {
                    Kind::PLAIN
                } else {
                    base.part()
                }
            }
            Expr::GetItem(g) => {
                let base = self.expr(&g.expr, Use::Read)?;
                self.expr(&g.subscript_expr, Use::Read)?;
                base.part()
            }
            Expr::Slice(s) => {
                let base = self.expr(&s.expr, Use::Read)?;
                for bound in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(bound, Use::Read)?;
                }
                base.part()
            }
            Expr::UnaryOp(op) => {
                self.expr(&op.expr, Use::Read)?;
                Kind::PLAIN
            }
            Expr::BinOp(op) => match op.op {
                // `a or b`, `a and b` give one of their operands.
                BinOpKind::ScAnd | BinOpKind::ScOr => self.expr(&op.left, u)?.join(self.expr(&op.right, u)?),
                // Lists added or repeated: a flat list of both sides' items.
                BinOpKind::Add | BinOpKind::Mul => self.expr(&op.left, u)?.join(self.expr(&op.right, u)?).part(),
                _ => {
                    self.expr(&op.left, Use::Read)?;
                    self.expr(&op.right, Use::Read)?;
                    Kind::PLAIN
                }
            },
            Expr::Compare(c) => {
                self.expr(&c.expr, Use::Read)?;
                for op in &c.ops {
                    self.expr(&op.expr, Use::Read)?;
                }
                Kind::PLAIN
            }
            Expr::IfExpr(i) => {
                self.expr(&i.test_expr, Use::Read)?;
                let mut k = self.expr(&i.true_expr, u)?;
                if let Some(f) = &i.false_expr {
                    k = k.join(self.expr(f, u)?);
                }
                k
            }
            Expr::Test(t) => {
                self.expr(&t.expr, Use::Read)?;
                self.args(&t.args, Use::Read)?;
                Kind::PLAIN
            }
            Expr::Filter(f) => {
                let name = f.name;
                if SCALAR_FILTERS.contains(&name) {
                    self.opt_expr(&f.expr, Use::Read)?;
                    self.args(&f.args, Use::Read)?;
                    Kind::PLAIN
                } else if PASS_FILTERS.contains(&name) {
                    self.opt_expr(&f.expr, u)?.join(self.args(&f.args, u)?)
                } else if PART_FILTERS.contains(&name) {
                    let input = self.opt_expr(&f.expr, u)?;
                    self.args(&f.args, Use::Read)?;
                    input.part()
                } else {
                    // map, batch, slice, items, dictsort, groupby, ...: new lists holding the input's items.
                    self.opt_expr(&f.expr, inner)?;
                    self.args(&f.args, inner)?;
                    Kind::PLAIN
                }
            }
            Expr::Call(c) => self.call(c, u)?,
            Expr::List(l) => {
                for item in &l.items {
                    self.expr(item, inner)?;
                }
                Kind::PLAIN
            }
            Expr::Tuple(t) => {
                for item in &t.items {
                    self.expr(item, inner)?;
                }
                Kind::PLAIN
            }
            Expr::Map(m) => {
                for item in m.keys.iter().chain(&m.values) {
                    self.expr(item, inner)?;
                }
                Kind::PLAIN
            }
        })
    }

    fn opt_expr(&mut self, e: &'a Option<Expr<'a>>, u: Use) -> Result<Kind, String> {
        match e {
            Some(e) => self.expr(e, u),
            None => Ok(Kind::PLAIN),
        }
    }

    /// The arguments' kinds, joined.
    fn args(&mut self, args: &'a [CallArg<'a>], u: Use) -> Result<Kind, String> {
        let mut k = Kind::PLAIN;
        for a in args {
            let (CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e)) = a;
            k = k.join(self.expr(e, u)?);
        }
        Ok(k)
    }

    fn call(&mut self, c: &'a ast::Call<'a>, u: Use) -> Result<Kind, String> {
        Ok(match c.identify_call() {
            CallType::Function(name) => match name {
                "range" | "lipsum" | "raise_exception" | "strftime_now" => {
                    self.args(&c.args, Use::Read)?;
                    Kind::PLAIN
                }
                // Objects that keep their arguments.
                "cycler" | "joiner" | "dict" | "loop" | "caller" => {
                    self.args(&c.args, Use::Wrap)?;
                    Kind::PLAIN
                }
                _ if self.kind_of(name).object => {
                    // `namespace(...)` (or a name bound to it): a new object holding its arguments.
                    if self.args(&c.args, Use::Keep)?.object {
                        return self.refuse("a namespace or loop object stored in a namespace");
                    }
                    Kind::OBJECT
                }
                _ if self.macros.contains_key(name) => {
                    self.macro_call(name, &c.args)?;
                    // A macro's value is its output: a string.
                    Kind::PLAIN
                }
                _ => {
                    self.args(&c.args, Use::Wrap)?;
                    Kind::STORED
                }
            },
            CallType::Method(receiver, name) => match name {
                "changed" => {
                    self.expr(receiver, Use::Read)?;
                    self.args(&c.args, Use::Wrap)?;
                    Kind::PLAIN
                }
                // `loop.cycle(a, b)` gives one of its arguments.
                "cycle" => {
                    self.expr(receiver, Use::Read)?;
                    self.args(&c.args, u)?
                }
                "get" | "keys" | "values" | "pop" => {
                    let base = self.expr(receiver, Use::Read)?;
                    base.part().join(self.args(&c.args, u)?)
                }
                _ if SCALAR_METHODS.contains(&name) => {
                    self.expr(receiver, Use::Read)?;
                    self.args(&c.args, Use::Read)?;
                    Kind::PLAIN
                }
                _ => {
                    // items() and anything else: new lists holding the receiver's parts.
                    let inner = if u == Use::Read { Use::Read } else { Use::Wrap };
                    self.expr(receiver, inner)?;
                    self.args(&c.args, inner)?;
                    Kind::PLAIN
                }
            },
            CallType::Object(callee) => {
                self.expr(callee, Use::Read)?;
                self.args(&c.args, Use::Wrap)?;
                Kind::STORED
            }
            // Calls of blocks, compiled in only if another crate enables minijinja's multi-template features.
            #[allow(unreachable_patterns)]
            _ => return self.refuse("blocks are not supported"),
        })
    }

    /// Bind a macro's parameters to what its call passes (splats and extra arguments: `varargs`, `kwargs`).
    fn macro_call(&mut self, name: &'a str, args: &'a [CallArg<'a>]) -> Result<(), String> {
        let params = self.macros[name].clone();
        let mut position = 0;
        for a in args {
            match a {
                CallArg::Pos(e) => {
                    let k = self.expr(e, Use::Keep)?;
                    self.bind(params.get(position).copied().unwrap_or("varargs"), k);
                    position += 1;
                }
                CallArg::Kwarg(key, e) => {
                    let k = self.expr(e, Use::Keep)?;
                    let param = params.iter().copied().find(|p| p == key).unwrap_or("kwargs");
                    self.bind(param, k);
                }
                CallArg::PosSplat(e) | CallArg::KwargSplat(e) => {
                    self.expr(e, Use::Wrap)?;
                }
            }
        }
        Ok(())
    }
}
