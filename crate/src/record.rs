//! The frame every persisted record shares: prefix-cache pages and saved states (`memory/`), the HNSW index's and
//! collections' records (`index/`), and MicroLoRA's saved training state (`training/mod.rs`). Records come back from
//! stores and files outside the process, so one is opened only once its length, magic number, version and checksum
//! hold; what its fields mean is its module's to check.
//!
//! ```text
//! 0   magic number        8 bytes, one per kind of record
//! 8   version             u32
//! 12  the record's fields (its module's layout)
//! end CRC-32 (IEEE) of all the above   u32
//! ```
//! Integers are little-endian (`u32_at`, `u64_at`, `f32_at` read them).

use std::fmt;

/// Bytes of the magic number and the version: where a record's own fields start.
pub(crate) const HEAD: usize = 12;

/// One kind of record. It is written in `version` and read in `oldest..=version`; every record of it holds at
/// least `header` bytes before its checksum (the frame's included); `what` names it in errors, with its article
/// ("a page record").
#[derive(Clone, Copy, Debug)]
pub(crate) struct Kind {
    pub what: &'static str,
    pub magic: [u8; 8],
    pub version: u32,
    pub oldest: u32,
    pub header: usize,
}

impl Kind {
    /// Begin a record of this kind: its magic number and version, for its fields to follow and [`seal`] to end.
    pub fn begin(&self) -> Vec<u8> {
        let mut out = self.magic.to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out
    }

    /// A record of this kind, once its frame holds: its length (`header` bytes and the checksum at least), magic
    /// number, version (one this build reads) and CRC-32, checked in that order. Its version, and its bytes without
    /// the checksum (so offsets are the layout's; its fields start at `HEAD`).
    pub fn open<'a>(&self, bytes: &'a [u8]) -> Result<(u32, &'a [u8]), FrameError> {
        let what = self.what;
        if bytes.len() < self.header.max(HEAD) + 4 || bytes[..8] != self.magic {
            return Err(FrameError::NotFramed { what, len: bytes.len() });
        }
        let version = u32_at(bytes, 8);
        if !(self.oldest..=self.version).contains(&version) {
            return Err(FrameError::Version { what, version, oldest: self.oldest, newest: self.version });
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body) != u32_at(crc, 0) {
            return Err(FrameError::Checksum { what });
        }
        Ok((version, body))
    }
}

/// End a record: the CRC-32 of everything before it.
pub(crate) fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Why bytes are not a record of a kind (`what`); each format maps it to its own error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// Too short for the kind, or another kind's magic number (or none).
    NotFramed { what: &'static str, len: usize },
    /// A version this build does not read (it reads `oldest..=newest`).
    Version { what: &'static str, version: u32, oldest: u32, newest: u32 },
    /// The CRC-32 does not match: the bytes changed after they were written.
    Checksum { what: &'static str },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::NotFramed { what, len } => write!(f, "{len} bytes without the magic number of {what}"),
            FrameError::Version { what, version, oldest, newest } if oldest == newest => {
                write!(f, "{what} of version {version}; this build reads {newest}")
            }
            FrameError::Version { what, version, oldest, newest } => {
                write!(f, "{what} of version {version}; this build reads {oldest} to {newest}")
            }
            FrameError::Checksum { what } => write!(f, "the checksum of {what} does not match: it was damaged"),
        }
    }
}

/// The little-endian u32 at `at` (the caller has checked the length).
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The little-endian u64 at `at` (the caller has checked the length).
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The little-endian f32 at `at` (the caller has checked the length).
pub(crate) fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    const KIND: Kind = Kind { what: "a test record", magic: *b"RVTEST\0\0", version: 3, oldest: 2, header: 16 };

    fn record(kind: &Kind, fields: &[u8]) -> Vec<u8> {
        let mut out = kind.begin();
        out.extend_from_slice(fields);
        seal(out)
    }

    #[test]
    fn records_round_trip_in_the_documented_layout() {
        let bytes = record(&KIND, b"abcdef");
        assert_eq!(&bytes[..12], b"RVTEST\0\0\x03\0\0\0");
        assert_eq!(&bytes[12..18], b"abcdef");
        // CRC-32 (IEEE), as crc32fast and zlib compute it: stored records depend on it.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(u32_at(&bytes, 18), crc32fast::hash(&bytes[..18]));
        assert_eq!(KIND.open(&bytes), Ok((3, &bytes[..18])));
        // An older version this kind still reads.
        let mut old = bytes[..18].to_vec();
        old[8] = 2;
        let old = seal(old);
        assert_eq!(KIND.open(&old), Ok((2, &old[..18])));
    }

    #[test]
    fn damaged_short_foreign_and_other_versions_are_refused() {
        let good = record(&KIND, b"abcdef");
        let what = KIND.what;
        for bit in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(KIND.open(&bad).is_err(), "bit {bit}");
        }
        let mut flipped = good.clone();
        flipped[14] ^= 1;
        assert_eq!(KIND.open(&flipped), Err(FrameError::Checksum { what }));
        // Cut anywhere: too short for the header, or the checksum is of other bytes.
        for cut in 0..good.len() {
            let e = KIND.open(&good[..cut]).unwrap_err();
            let short = cut < KIND.header + 4;
            assert_eq!(e, if short { FrameError::NotFramed { what, len: cut } } else { FrameError::Checksum { what } });
        }
        let other = Kind { magic: *b"RVOTHER\0", ..KIND };
        assert_eq!(KIND.open(&record(&other, b"abcdef")), Err(FrameError::NotFramed { what, len: good.len() }));
        for version in [0, 1, 4, u32::MAX] {
            let mut bytes = good[..18].to_vec();
            bytes[8..12].copy_from_slice(&version.to_le_bytes());
            let e = KIND.open(&seal(bytes)).unwrap_err();
            assert_eq!(e, FrameError::Version { what, version, oldest: 2, newest: 3 });
        }
        assert_eq!(
            FrameError::Version { what, version: 4, oldest: 3, newest: 3 }.to_string(),
            "a test record of version 4; this build reads 3"
        );
        assert_eq!(KIND.open(b"").unwrap_err().to_string(), "0 bytes without the magic number of a test record");
    }
}
