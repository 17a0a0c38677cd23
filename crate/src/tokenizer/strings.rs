//! `StrTable`: a list of strings stored end to end and found by text through a hash table of their indexes. A
//! vocabulary's token texts and a BPE's merges are one table each, not a heap allocation per string plus a second
//! copy of it as a map's key.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

pub(crate) struct StrTable {
    /// Every string, in order.
    bytes: String,
    /// Where each string ends in `bytes`.
    ends: Vec<usize>,
    /// The index of the first of each distinct string, by its text's hash.
    index: HashTable<u32>,
    hasher: RandomState,
}

impl StrTable {
    /// An empty table with room for `n` strings of `bytes` bytes in all.
    pub(crate) fn with_capacity(n: usize, bytes: usize) -> StrTable {
        StrTable {
            bytes: String::with_capacity(bytes),
            ends: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
            hasher: RandomState::new(),
        }
    }

    /// Append `s` as string `self.len()`. When an equal string is in the table already, it stays the one `find`
    /// answers and its index is returned.
    pub(crate) fn push(&mut self, s: &str) -> Option<u32> {
        let i = u32::try_from(self.ends.len()).expect("at most u32::MAX strings");
        let StrTable { bytes, ends, index, hasher } = self;
        let text = |j: u32| text(bytes, ends, j);
        let hash = hasher.hash_one(s);
        let earlier = index.find(hash, |&j| text(j) == s).copied();
        if earlier.is_none() {
            index.insert_unique(hash, i, |&j| hasher.hash_one(text(j)));
        }
        bytes.push_str(s);
        ends.push(bytes.len());
        earlier
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// String `i`.
    pub(crate) fn get(&self, i: u32) -> Option<&str> {
        ((i as usize) < self.ends.len()).then(|| text(&self.bytes, &self.ends, i))
    }

    /// The index of the first string equal to `s`.
    pub(crate) fn find(&self, s: &str) -> Option<u32> {
        self.index.find(self.hasher.hash_one(s), |&j| text(&self.bytes, &self.ends, j) == s).copied()
    }

    /// The strings in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.ends.len() as u32).map(|i| text(&self.bytes, &self.ends, i))
    }

    /// The bytes of all the strings.
    pub(crate) fn total_len(&self) -> usize {
        self.bytes.len()
    }
}

/// String `i` of `bytes` as `ends` delimits them (`i` in range).
fn text<'a>(bytes: &'a str, ends: &[usize], i: u32) -> &'a str {
    let i = i as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] };
    &bytes[start..ends[i]]
}

#[cfg(test)]
mod tests {
    use super::StrTable;
    use crate::test_support::test;

    #[test]
    fn finds_strings_by_text_and_keeps_the_first_of_equals() {
        let mut t = StrTable::with_capacity(2, 4);
        assert_eq!(t.push("ab"), None);
        assert_eq!(t.push(""), None);
        assert_eq!(t.push("a b"), None);
        assert_eq!(t.push("ab"), Some(0));
        assert_eq!(t.len(), 4);
        assert_eq!((t.find("ab"), t.find(""), t.find("a b"), t.find("a")), (Some(0), Some(1), Some(2), None));
        assert_eq!(t.iter().collect::<Vec<_>>(), ["ab", "", "a b", "ab"]);
        assert_eq!((t.get(3), t.get(4)), (Some("ab"), None));
        assert_eq!(t.total_len(), 7);
        for i in 0..1000u32 {
            t.push(&i.to_string());
        }
        assert!((0..1000u32).all(|i| t.find(&i.to_string()) == Some(4 + i)));
    }
}
