//! Code point classes as llama.cpp's unicode.cpp sees them: the general category (Unicode 15.1, grouped into
//! letter / number / punctuation / ...) and its fixed whitespace set.

mod table {
    include!("unicode_table.rs");
}

/// llama.cpp's grouping of the Unicode general categories. The discriminants index the generated table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Category {
    Undefined = 0,
    Number = 1,
    Letter = 2,
    Separator = 3,
    Mark = 4,
    Punctuation = 5,
    Symbol = 6,
    Control = 7,
}

pub(crate) fn category(c: char) -> Category {
    let cp = c as u32;
    // The last range starting at or before `cp`; the first range starts at 0, so there is always one.
    let i = table::CATEGORY_RANGES.partition_point(|&e| (e >> 8) <= cp) - 1;
    match table::CATEGORY_RANGES[i] & 0xFF {
        0 => Category::Undefined,
        1 => Category::Number,
        2 => Category::Letter,
        3 => Category::Separator,
        4 => Category::Mark,
        5 => Category::Punctuation,
        6 => Category::Symbol,
        _ => Category::Control,
    }
}

pub(crate) fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    category(c) == Category::Letter
}

pub(crate) fn is_number(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    category(c) == Category::Number
}

/// The first code point of `c`'s NFD form (llama.cpp's unicode_cpts_normalize_nfd): a letter without its accents.
pub(crate) fn nfd_first(c: char) -> char {
    let cp = c as u32;
    // The last range starting at or before `cp`, if any.
    let i = table::NFD_RANGES.partition_point(|&(first, _, _)| first <= cp);
    match i.checked_sub(1).map(|i| table::NFD_RANGES[i]) {
        Some((_, last, nfd)) if cp <= last => char::from_u32(nfd).unwrap_or(c),
        _ => c,
    }
}

/// `\s` in llama.cpp's splitters: its fixed list, which is exactly Unicode's White_Space property.
pub(crate) fn is_whitespace(c: char) -> bool {
    matches!(c as u32, 0x09..=0x0D | 0x20 | 0x85 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn categories_of_sample_code_points() {
        assert_eq!(category('a'), Category::Letter);
        assert_eq!(category('7'), Category::Number);
        assert_eq!(category(' '), Category::Separator);
        assert_eq!(category('\n'), Category::Control);
        assert_eq!(category('!'), Category::Punctuation);
        assert_eq!(category('$'), Category::Symbol);
        assert_eq!(category('\u{0301}'), Category::Mark); // combining acute accent
        assert_eq!(category('é'), Category::Letter);
        assert_eq!(category('²'), Category::Number); // No
        assert_eq!(category('٣'), Category::Number); // Arabic-Indic digit
        assert_eq!(category('你'), Category::Letter);
        assert_eq!(category('，'), Category::Punctuation);
        assert_eq!(category('😀'), Category::Symbol);
        assert_eq!(category('\u{200D}'), Category::Control); // zero width joiner: Cf
        assert_eq!(category('\u{0378}'), Category::Undefined);
        // Unicode 15.1 additions (the version llama.cpp's tables use).
        assert_eq!(category('\u{31EF}'), Category::Symbol);
        assert_eq!(category('\u{2EBF0}'), Category::Letter);
        // Added in Unicode 16, so still unassigned here.
        assert_eq!(category('\u{1C89}'), Category::Undefined);
        assert_eq!(category('\u{10FFFF}'), Category::Undefined);
        assert_eq!(category('\u{10FFFD}'), Category::Control); // private use
    }

    #[test]
    fn nfd_first_drops_accents() {
        assert_eq!(nfd_first('é'), 'e');
        assert_eq!(nfd_first('Å'), 'A');
        assert_eq!(nfd_first('ω'), 'ω');
        assert_eq!(nfd_first('a'), 'a');
        assert_eq!(nfd_first('가'), '\u{1100}'); // a Hangul syllable's leading consonant, as llama.cpp's table
    }

    #[test]
    fn whitespace_is_the_white_space_property() {
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            assert_eq!(is_whitespace(c), c.is_whitespace(), "U+{:04X}", c as u32);
        }
    }
}
