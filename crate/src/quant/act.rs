//! Activation formats for dot products, as ggml's "vec_dot_type"s.
//!
//! A matmul quantizes its input activations once, into the format its weight type is dotted
//! against, then reuses them for every weight row. [`BlockQ8_0`] doubles as the Q8_0 *weight*
//! block, exactly as in ggml.

use std::any::TypeId;

use half::f16;

pub const QK8: usize = 32;
pub const QK_K: usize = 256;

/// Which activation format a weight type needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    F32,
    Q8_0,
    Q8_1,
    Q8K,
}

/// 32 values: `x[i] ≈ d * qs[i]`. Also the Q8_0 weight block (34 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: [u8; 2], // f16
    pub qs: [i8; QK8],
}

/// 32 values: `x[i] ≈ d * qs[i]`, with `s = d * sum(qs)` (used by weight types with a min/offset).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ8_1 {
    pub d: [u8; 2], // f16
    pub s: [u8; 2], // f16
    pub qs: [i8; QK8],
}

/// 256 values for the K-quants: `x[i] ≈ d * qs[i]`, `bsums[j] = sum(qs[16j..16j+16])`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K { d: 0.0, qs: [0; QK_K], bsums: [0; QK_K / 16] }
    }
}

#[inline]
pub fn f16_to_f32(b: [u8; 2]) -> f32 {
    f16::from_le_bytes(b).to_f32()
}

#[inline]
pub fn f32_to_f16(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

/// ggml's `quantize_row_q8_0_ref`. `x.len() == out.len() * 32`.
pub fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xb, y) in x.chunks_exact(QK8).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.d = f32_to_f16(d);
        for (q, v) in y.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
        }
    }
}

/// ggml's `quantize_row_q8_1_ref`. `x.len() == out.len() * 32`.
pub fn quantize_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    for (xb, y) in x.chunks_exact(QK8).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, v) in y.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        y.d = f32_to_f16(d);
        y.s = f32_to_f16(sum as f32 * d);
    }
}

/// ggml's `quantize_row_q8_K_ref`. `x.len() == out.len() * 256`.
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *y = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(xb) {
            *q = ((iscale * v).round() as i32).min(127) as i8;
        }
        for (s, qs) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
            *s = qs.iter().map(|&q| q as i16).sum();
        }
        y.d = 1.0 / iscale;
    }
}

/// A batch of activation rows, quantized for one weight type. Buffers are kept and reused
/// across calls, so the decode loop does not allocate.
#[derive(Default)]
pub struct Activations {
    kind: Option<ActKind>,
    rows: usize,
    cols: usize,
    f32s: Vec<f32>,
    q8_0: Vec<BlockQ8_0>,
    q8_1: Vec<BlockQ8_1>,
    q8k: Vec<BlockQ8K>,
    /// Per Q8_0/Q8_1 block: `(d, s)` converted to f32 once (`s = 0` for Q8_0), for the tile kernels.
    scales: Vec<[f32; 2]>,
}

impl Activations {
    pub fn new() -> Self {
        Self::default()
    }

    /// Quantize `rows` rows of `x` (row-major, `x.len() / rows` columns each) into `kind`.
    pub fn quantize(&mut self, kind: ActKind, x: &[f32], rows: usize) {
        assert!(rows > 0 && x.len() % rows == 0);
        self.kind = Some(kind);
        self.rows = rows;
        self.cols = x.len() / rows;
        let n = x.len();
        match kind {
            ActKind::F32 => {
                self.f32s.clear();
                self.f32s.extend_from_slice(x);
            }
            ActKind::Q8_0 => {
                self.q8_0.resize(n / QK8, BlockQ8_0::default());
                quantize_q8_0(x, &mut self.q8_0);
                self.scales.clear();
                self.scales.extend(self.q8_0.iter().map(|b| [f16_to_f32(b.d), 0.0]));
            }
            ActKind::Q8_1 => {
                self.q8_1.resize(n / QK8, BlockQ8_1::default());
                quantize_q8_1(x, &mut self.q8_1);
                self.scales.clear();
                self.scales.extend(self.q8_1.iter().map(|b| [f16_to_f32(b.d), f16_to_f32(b.s)]));
            }
            ActKind::Q8K => {
                self.q8k.resize(n / QK_K, BlockQ8K::default());
                quantize_q8k(x, &mut self.q8k);
            }
        }
    }

    pub fn kind(&self) -> Option<ActKind> {
        self.kind
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `r`'s block scales `(d, s)` as f32, for Q8_0 (`s = 0`) and Q8_1 rows (exactly the blocks' f16 values).
    pub fn row_scales(&self, r: usize) -> &[[f32; 2]] {
        assert!(r < self.rows && matches!(self.kind, Some(ActKind::Q8_0 | ActKind::Q8_1)));
        let per = self.scales.len() / self.rows;
        &self.scales[r * per..(r + 1) * per]
    }

    /// Row `r` as a view for `vec_dot`.
    pub fn row(&self, r: usize) -> ActRow<'_> {
        assert!(r < self.rows);
        fn slice<T>(v: &[T], r: usize, rows: usize) -> &[T] {
            let per = v.len() / rows;
            &v[r * per..(r + 1) * per]
        }
        match self.kind.expect("Activations::row before quantize") {
            ActKind::F32 => ActRow::F32(slice(&self.f32s, r, self.rows)),
            ActKind::Q8_0 => ActRow::Q8_0(slice(&self.q8_0, r, self.rows)),
            ActKind::Q8_1 => ActRow::Q8_1(slice(&self.q8_1, r, self.rows)),
            ActKind::Q8K => ActRow::Q8K(slice(&self.q8k, r, self.rows)),
        }
    }
}

/// One activation row in one of the formats.
#[derive(Clone, Copy, Debug)]
pub enum ActRow<'a> {
    F32(&'a [f32]),
    Q8_0(&'a [BlockQ8_0]),
    Q8_1(&'a [BlockQ8_1]),
    Q8K(&'a [BlockQ8K]),
}

impl<'a> ActRow<'a> {
    /// The row as blocks of `T`. Panics when `T` is not this row's block type (a caller bug).
    pub fn blocks<T: 'static>(self) -> &'a [T] {
        fn cast<'b, S: 'static, T: 'static>(s: &'b [S]) -> Option<&'b [T]> {
            // SAFETY: S and T are the same type when their TypeIds are equal.
            (TypeId::of::<S>() == TypeId::of::<T>())
                .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr() as *const T, s.len()) })
        }
        let r = match self {
            ActRow::F32(s) => cast(s),
            ActRow::Q8_0(s) => cast(s),
            ActRow::Q8_1(s) => cast(s),
            ActRow::Q8K(s) => cast(s),
        };
        r.unwrap_or_else(|| panic!("activation row {self:?} is not of the requested block type"))
    }
}
