//! What every test shares: the test attribute of both targets, one deterministic generator, and the grammars
//! whose reference chains reach past the constraint compiler's stack.
//!
//! The crate's unit tests use it as `crate::test_support`; the integration tests (tests/rust) compile
//! this same file into their `support` module, so it uses nothing of the crate.

/// `#[test]` on every target: import it (`use crate::test_support::test;`) and write `#[test]`. Natively
/// it is the built-in test attribute; on wasm32 it is wasm-bindgen-test's, which runs in Node or a browser.
#[cfg(not(target_arch = "wasm32"))]
pub use std::prelude::v1::test;
#[cfg(target_arch = "wasm32")]
pub use wasm_bindgen_test::wasm_bindgen_test as test;

/// Deterministic xorshift64* generator: test data the same on every run and target, without a rand crate.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform(0.0, 1.0); // (0, 1]
        let u2 = self.uniform(0.0, 1.0);
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }

    pub fn fill(&mut self, bytes: &mut [u8]) {
        for b in bytes {
            *b = self.next_u64() as u8;
        }
    }

    /// A float of random sign and magnitude between 2^-12 and 2 (log-uniform): a sane scale or weight.
    pub fn sane(&mut self) -> f32 {
        let sign = if self.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
        sign * self.uniform(-12.0, 1.0).exp2()
    }
}

/// A JSON Schema whose `$ref`s chain `n` hops deep: `d0` is an array of `d1`, ..., `dn` a string.
pub fn ref_chain_schema(n: usize) -> serde_json::Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let items = serde_json::json!({ "$ref": format!("#/$defs/d{}", i + 1) });
        defs.insert(format!("d{i}"), serde_json::json!({ "type": "array", "items": items }));
    }
    defs.insert(format!("d{n}"), serde_json::json!({ "type": "string" }));
    serde_json::json!({ "$defs": defs, "$ref": "#/$defs/d0" })
}

/// A Lark grammar whose rules reference each other in a chain `n` deep: `start` uses `r0`, `r0` uses `r1`, ...
pub fn lark_rule_chain(n: usize) -> String {
    let rules: String = (0..n).map(|i| format!("r{i}: r{} \"x\"\n", i + 1)).collect();
    format!("{rules}r{n}: \"y\"\nstart: r0\n")
}

/// The names in backticks of the README's "Supported" list item `label` ("- Architectures: ..." up to the next item
/// or blank line), in order: what each code table's test holds the README to.
pub fn readme_supported(label: &str) -> Vec<&'static str> {
    const README: &str = include_str!("../../README.md");
    let head = format!("- {label}:");
    let start = README.find(&head).unwrap_or_else(|| panic!("README.md has no '{head}' item"));
    let item = &README[start + head.len()..];
    let end = ["\n- ", "\n\n"].iter().filter_map(|e| item.find(e)).min().unwrap_or(item.len());
    item[..end].split('`').skip(1).step_by(2).collect()
}
