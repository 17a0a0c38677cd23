//! How deep llguidance will recurse to compile a grammar, measured before it does. Its compilers follow JSON
//! Schema nesting, `$ref`s and Lark rule references recursively, so a long enough chain (a few hundred `$ref`
//! hops or rules) overflows the stack: a process abort natively, a trap in wasm. These walks are iterative and
//! measure the longest chain (a reference back to a schema or rule already on the chain is a cycle, which
//! llguidance compiles once, and counts nothing); `GrammarSource` refuses what is deeper than its limit.

use std::collections::HashMap;

use serde_json::Value;

/// The longest chain of nested subschemas and local `$ref` hops in `schema`, from its root.
pub(super) fn json_schema_depth(schema: &Value) -> usize {
    let mut walk = Walk::default();
    walk.longest(schema, schema)
}

/// Per subschema (by address: they all live in one document), its depth once known; `None` while on the chain.
#[derive(Default)]
struct Walk {
    memo: HashMap<*const Value, Option<usize>>,
}

impl Walk {
    fn longest(&mut self, root: &Value, start: &Value) -> usize {
        // Each frame: a subschema, its children, the next child to visit, the deepest child so far.
        let mut stack: Vec<(&Value, Vec<&Value>, usize, usize)> = Vec::new();
        self.memo.insert(start, None);
        stack.push((start, children(root, start), 0, 0));
        loop {
            let frame = stack.last_mut().expect("the walk ends when its root is done");
            if frame.2 < frame.1.len() {
                let child = frame.1[frame.2];
                frame.2 += 1;
                match self.memo.get(&(child as *const Value)) {
                    Some(Some(depth)) => frame.3 = frame.3.max(*depth),
                    Some(None) => {} // a cycle
                    None => {
                        self.memo.insert(child, None);
                        let grandchildren = children(root, child);
                        stack.push((child, grandchildren, 0, 0));
                    }
                }
                continue;
            }
            let (node, _, _, deepest) = stack.pop().expect("a frame is on the stack");
            let depth = deepest + 1;
            self.memo.insert(node, Some(depth));
            match stack.last_mut() {
                Some(parent) => parent.3 = parent.3.max(depth),
                None => return depth,
            }
        }
    }
}

/// The subschemas `schema` holds or refers to (local `$ref`s as JSON pointers; others are llguidance's error).
fn children<'a>(root: &'a Value, schema: &'a Value) -> Vec<&'a Value> {
    let mut out = Vec::new();
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(pointer)) => {
                        if let Some(target) = pointer.strip_prefix('#').and_then(|p| root.pointer(p)) {
                            out.push(target);
                        }
                    }
                    // Values that are data, not subschemas.
                    ("const" | "enum" | "examples" | "default" | "required" | "description" | "title", _) => {}
                    (_, Value::Object(_) | Value::Array(_)) => out.push(value),
                    _ => {}
                }
            }
        }
        Value::Array(items) => out.extend(items.iter().filter(|v| v.is_object() || v.is_array())),
        _ => {}
    }
    out
}

/// The longest chain of rule references in a Lark grammar from `start` (or its first rule), and in the JSON
/// Schemas it inlines with `%json {...}` (their depth added where they appear). A rough reader of Lark: enough
/// to find definitions (`name:` at a line's start) and the names their bodies use, outside strings, regular
/// expressions and `<token>`s.
pub(super) fn lark_depth(src: &str) -> usize {
    let mut rules: Vec<(&str, Vec<&str>, usize)> = Vec::new();
    let mut current: Option<usize> = None;
    let bytes = src.as_bytes();
    let mut i = 0;
    let mut line_start = true;
    while i < bytes.len() {
        let c = bytes[i];
        if line_start {
            line_start = false;
            if let Some((name, end)) = definition(src, i) {
                rules.push((name, Vec::new(), 0));
                current = Some(rules.len() - 1);
                i = end;
                continue;
            }
        }
        match c {
            b'\n' => {
                line_start = true;
                i += 1;
            }
            b'"' | b'/' => i = skip_quoted(bytes, i, c),
            b'<' => i = bytes[i..].iter().position(|&b| b == b'>' || b == b'\n').map_or(bytes.len(), |p| i + p + 1),
            b'#' => i = bytes[i..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| i + p),
            b'%' if src[i..].starts_with("%json") => {
                let open = src[i..].find('{').map_or(bytes.len(), |p| i + p);
                let close = matching_brace(bytes, open);
                let depth =
                    serde_json::from_str::<Value>(&src[open.min(close)..close]).map_or(0, |v| json_schema_depth(&v));
                if let Some(r) = current {
                    rules[r].2 = rules[r].2.max(depth);
                }
                i = close;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let end = i + bytes[i..].iter().position(|&b| !is_name_byte(b)).unwrap_or(bytes.len() - i);
                if let Some(r) = current {
                    rules[r].1.push(&src[i..end]);
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    let index: HashMap<&str, usize> = rules.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
    let Some(&start) = index.get("start").or_else(|| (!rules.is_empty()).then_some(&0)) else { return 0 };
    // Iterative longest path with cycles cut, as for schemas.
    let mut memo: Vec<Option<Option<usize>>> = vec![None; rules.len()];
    let mut stack: Vec<(usize, usize, usize)> = vec![(start, 0, 0)];
    memo[start] = Some(None);
    loop {
        let (rule, next, deepest) = *stack.last().expect("the walk ends when start is done");
        if let Some(name) = rules[rule].1.get(next) {
            stack.last_mut().expect("a frame").1 += 1;
            if let Some(&child) = index.get(name) {
                match memo[child] {
                    Some(Some(depth)) => stack.last_mut().expect("a frame").2 = deepest.max(depth),
                    Some(None) => {}
                    None => {
                        memo[child] = Some(None);
                        stack.push((child, 0, 0));
                    }
                }
            }
            continue;
        }
        stack.pop();
        let depth = deepest.max(rules[rule].2) + 1;
        memo[rule] = Some(Some(depth));
        match stack.last_mut() {
            Some(parent) => parent.2 = parent.2.max(depth),
            None => return depth,
        }
    }
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// A definition at `i` (after indentation: `?name:`, `!name:`, `name[...]:`, `NAME.2:`): its name and where its
/// body begins.
fn definition(src: &str, i: usize) -> Option<(&str, usize)> {
    let bytes = src.as_bytes();
    let mut j = i;
    while j < bytes.len() && (bytes[j] == b' ' || bytes[j] == b'\t') {
        j += 1;
    }
    if j < bytes.len() && (bytes[j] == b'?' || bytes[j] == b'!') {
        j += 1;
    }
    let name_start = j;
    if j >= bytes.len() || !(bytes[j].is_ascii_alphabetic() || bytes[j] == b'_') {
        return None;
    }
    while j < bytes.len() && is_name_byte(bytes[j]) {
        j += 1;
    }
    let name = &src[name_start..j];
    if j < bytes.len() && bytes[j] == b'[' {
        j += bytes[j..].iter().position(|&b| b == b']' || b == b'\n')? + 1;
    }
    if j < bytes.len() && bytes[j] == b'.' {
        j += 1;
        while j < bytes.len() && (bytes[j].is_ascii_digit() || bytes[j] == b'-') {
            j += 1;
        }
    }
    while j < bytes.len() && (bytes[j] == b' ' || bytes[j] == b'\t') {
        j += 1;
    }
    (j < bytes.len() && bytes[j] == b':').then_some((name, j + 1))
}

/// Past the string or regular expression opening at `i` with `quote` (escapes skipped; a line ends it).
fn skip_quoted(bytes: &[u8], i: usize, quote: u8) -> usize {
    let mut j = i + 1;
    while j < bytes.len() && bytes[j] != b'\n' {
        match bytes[j] {
            b'\\' => j += 2,
            b if b == quote => return j + 1,
            _ => j += 1,
        }
    }
    j.min(bytes.len())
}

/// Past the `}` that closes the `{` at `open` (strings skipped), or the end.
fn matching_brace(bytes: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    let mut j = open;
    while j < bytes.len() {
        match bytes[j] {
            b'"' => {
                j = skip_quoted(bytes, j, b'"');
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{lark_rule_chain, ref_chain_schema, test};
    use serde_json::json;

    #[test]
    fn schema_depth_counts_nesting_and_ref_hops_and_cuts_cycles() {
        assert_eq!(json_schema_depth(&json!({ "type": "string" })), 1);
        assert_eq!(json_schema_depth(&json!({ "type": "array", "items": { "type": "string" } })), 2);
        let short = json_schema_depth(&ref_chain_schema(10));
        let long = json_schema_depth(&ref_chain_schema(1000));
        assert!(short < 40 && long > 2000, "{short} {long}");
        // A recursive schema (a tree) is one cycle, however it is used.
        let tree = json!({ "$defs": { "node": { "type": "object", "properties": {
            "children": { "type": "array", "items": { "$ref": "#/$defs/node" } } } } }, "$ref": "#/$defs/node" });
        assert!(json_schema_depth(&tree) < 10);
        // Data is not walked: a deep `const` costs nothing to compile this way.
        let mut deep = json!(1);
        for _ in 0..500 {
            deep = json!([deep]);
        }
        assert!(json_schema_depth(&json!({ "const": deep })) < 3);
    }

    #[test]
    fn lark_depth_follows_rule_references_and_inline_schemas() {
        assert!(lark_depth(&lark_rule_chain(10)) <= 13);
        assert!(lark_depth(&lark_rule_chain(1000)) > 1000);
        // Names inside strings, regexes, comments and tokens are not references; cycles count once.
        let src = "start: a \"r0 r1\" /r2/ <r3> # r4\na: b | \"a\"\nb: a \"b\"\n";
        assert_eq!(lark_depth(src), 3);
        let inline = format!("start: \"x\" %json {}\n", ref_chain_schema(200));
        assert!(lark_depth(&inline) > 200);
    }
}
