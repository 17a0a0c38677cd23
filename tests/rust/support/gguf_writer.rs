//! A minimal GGUF v3 writer for tests that need small or deliberately broken files.

pub enum Meta {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    I32(i32),
    U64(u64),
    I64(i64),
    F64(f64),
    /// An array of arrays of u32 (nested arrays).
    U32Arrays(Vec<Vec<u32>>),
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArray(Vec<String>),
    F32Array(Vec<f32>),
    I32Array(Vec<i32>),
    U8Array(Vec<u8>),
}

pub struct Tensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
}

#[derive(Default)]
pub struct GgufWriter {
    pub version: u32,
    pub meta: Vec<(String, Meta)>,
    pub tensors: Vec<Tensor>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter { version: 3, ..Default::default() }
    }

    pub fn meta(mut self, key: &str, v: Meta) -> Self {
        self.meta.push((key.into(), v));
        self
    }

    pub fn tensor(mut self, name: &str, dims: &[u64], type_id: u32, data: Vec<u8>) -> Self {
        self.tensors.push(Tensor { name: name.into(), dims: dims.to_vec(), type_id, data });
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.meta.len() as u64).to_le_bytes());
        for (k, v) in &self.meta {
            put_str(&mut out, k);
            match v {
                Meta::U8(x) => {
                    out.extend(0u32.to_le_bytes());
                    out.push(*x);
                }
                Meta::I8(x) => {
                    out.extend(1u32.to_le_bytes());
                    out.push(*x as u8);
                }
                Meta::U16(x) => {
                    out.extend(2u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::I16(x) => {
                    out.extend(3u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::I32(x) => {
                    out.extend(5u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::U64(x) => {
                    out.extend(10u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::I64(x) => {
                    out.extend(11u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::F64(x) => {
                    out.extend(12u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::U32Arrays(outer) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(9u32.to_le_bytes());
                    out.extend((outer.len() as u64).to_le_bytes());
                    for inner in outer {
                        out.extend(4u32.to_le_bytes());
                        out.extend((inner.len() as u64).to_le_bytes());
                        inner.iter().for_each(|x| out.extend(x.to_le_bytes()));
                    }
                }
                Meta::U32(x) => {
                    out.extend(4u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::F32(x) => {
                    out.extend(6u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::Bool(x) => {
                    out.extend(7u32.to_le_bytes());
                    out.push(*x as u8);
                }
                Meta::Str(s) => {
                    out.extend(8u32.to_le_bytes());
                    put_str(&mut out, s);
                }
                Meta::StrArray(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(8u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    a.iter().for_each(|s| put_str(&mut out, s));
                }
                Meta::F32Array(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(6u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    a.iter().for_each(|x| out.extend(x.to_le_bytes()));
                }
                Meta::I32Array(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(5u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    a.iter().for_each(|x| out.extend(x.to_le_bytes()));
                }
                Meta::U8Array(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(0u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    out.extend(a);
                }
            }
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            t.dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(t.type_id.to_le_bytes());
            out.extend(offset.to_le_bytes());
            offsets.push(offset);
            offset += (t.data.len() as u64).div_ceil(32) * 32;
        }
        while !out.len().is_multiple_of(32) {
            out.push(0);
        }
        let base = out.len();
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize(base + off as usize, 0);
            out.extend(&t.data);
        }
        out
    }
}
