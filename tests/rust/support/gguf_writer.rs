//! A minimal GGUF v3 writer for tests that need small or deliberately broken files. The fuzz target
//! `gguf_structured` (fuzz/) writes its files with it too.

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
    /// An array of any element type: the type id is written once, then each item's value without its type
    /// (items of another type than `elem` make a malformed array, on purpose or not).
    Array(u32, Vec<Meta>),
}

impl Meta {
    /// A parsed metadata value as the writer's, to copy a real file's metadata; arrays take their element type from
    /// their first item (an empty array is written as one of u32).
    pub fn of(v: &ruvllm::gguf::Value) -> Result<Meta, String> {
        use ruvllm::gguf::Value;
        Ok(match v {
            Value::U8(x) => Meta::U8(*x),
            Value::I8(x) => Meta::I8(*x),
            Value::U16(x) => Meta::U16(*x),
            Value::I16(x) => Meta::I16(*x),
            Value::U32(x) => Meta::U32(*x),
            Value::I32(x) => Meta::I32(*x),
            Value::F32(x) => Meta::F32(*x),
            Value::Bool(x) => Meta::Bool(*x),
            Value::String(x) => Meta::Str(x.clone()),
            Value::U64(x) => Meta::U64(*x),
            Value::I64(x) => Meta::I64(*x),
            Value::F64(x) => Meta::F64(*x),
            Value::Array(items) => {
                let items = items.iter().map(Meta::of).collect::<Result<Vec<_>, _>>()?;
                let elem = items.first().map_or(4, Meta::type_id);
                if items.iter().any(|m| m.type_id() != elem) {
                    return Err("a metadata array of mixed types".into());
                }
                Meta::Array(elem, items)
            }
        })
    }

    /// The GGUF value type id.
    pub fn type_id(&self) -> u32 {
        match self {
            Meta::U8(_) => 0,
            Meta::I8(_) => 1,
            Meta::U16(_) => 2,
            Meta::I16(_) => 3,
            Meta::U32(_) => 4,
            Meta::I32(_) => 5,
            Meta::F32(_) => 6,
            Meta::Bool(_) => 7,
            Meta::Str(_) => 8,
            Meta::U32Arrays(_)
            | Meta::StrArray(_)
            | Meta::F32Array(_)
            | Meta::I32Array(_)
            | Meta::U8Array(_)
            | Meta::Array(..) => 9,
            Meta::U64(_) => 10,
            Meta::I64(_) => 11,
            Meta::F64(_) => 12,
        }
    }

    /// The value without its type id.
    fn put(&self, out: &mut Vec<u8>) {
        fn array(out: &mut Vec<u8>, elem: u32, len: usize) {
            out.extend(elem.to_le_bytes());
            out.extend((len as u64).to_le_bytes());
        }
        match self {
            Meta::U8(x) => out.push(*x),
            Meta::I8(x) => out.push(*x as u8),
            Meta::U16(x) => out.extend(x.to_le_bytes()),
            Meta::I16(x) => out.extend(x.to_le_bytes()),
            Meta::U32(x) => out.extend(x.to_le_bytes()),
            Meta::I32(x) => out.extend(x.to_le_bytes()),
            Meta::F32(x) => out.extend(x.to_le_bytes()),
            Meta::Bool(x) => out.push(*x as u8),
            Meta::Str(s) => put_str(out, s),
            Meta::U64(x) => out.extend(x.to_le_bytes()),
            Meta::I64(x) => out.extend(x.to_le_bytes()),
            Meta::F64(x) => out.extend(x.to_le_bytes()),
            Meta::U32Arrays(outer) => {
                array(out, 9, outer.len());
                for inner in outer {
                    array(out, 4, inner.len());
                    inner.iter().for_each(|x| out.extend(x.to_le_bytes()));
                }
            }
            Meta::StrArray(a) => {
                array(out, 8, a.len());
                a.iter().for_each(|s| put_str(out, s));
            }
            Meta::F32Array(a) => {
                array(out, 6, a.len());
                a.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
            Meta::I32Array(a) => {
                array(out, 5, a.len());
                a.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
            Meta::U8Array(a) => {
                array(out, 0, a.len());
                out.extend(a);
            }
            Meta::Array(elem, items) => {
                array(out, *elem, items.len());
                items.iter().for_each(|x| x.put(out));
            }
        }
    }
}

pub struct Tensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
    /// Bytes of zeros in the place of `data` (a stand-in's padding, larger than memory: [`GgufWriter::parts`]).
    pub zeros: u64,
}

impl Tensor {
    fn len(&self) -> u64 {
        self.data.len() as u64 + self.zeros
    }
}

/// A piece of a file as [`GgufWriter::parts`] gives it.
pub enum Part {
    Bytes(Vec<u8>),
    Zeros(u64),
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
        self.tensors.push(Tensor { name: name.into(), dims: dims.to_vec(), type_id, data, zeros: 0 });
        self
    }

    /// A tensor of `len` bytes of zeros, never held (`parts`).
    pub fn zeros(mut self, name: &str, dims: &[u64], type_id: u32, len: u64) -> Self {
        self.tensors.push(Tensor { name: name.into(), dims: dims.to_vec(), type_id, data: Vec::new(), zeros: len });
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for part in self.parts() {
            match part {
                Part::Bytes(b) => out.extend(b),
                Part::Zeros(n) => out.resize(out.len() + n as usize, 0),
            }
        }
        out
    }

    /// The file in order: its header and tensors' bytes, runs of zeros (padding, `zeros` tensors) as their length.
    pub fn parts(&self) -> Vec<Part> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.meta.len() as u64).to_le_bytes());
        for (k, v) in &self.meta {
            put_str(&mut out, k);
            out.extend(v.type_id().to_le_bytes());
            v.put(&mut out);
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
            offset += t.len().div_ceil(32) * 32;
        }
        while !out.len().is_multiple_of(32) {
            out.push(0);
        }
        let mut parts = vec![Part::Bytes(out)];
        let mut at = 0;
        for (t, off) in self.tensors.iter().zip(offsets) {
            parts.push(Part::Zeros(off - at + t.zeros));
            parts.push(Part::Bytes(t.data.clone()));
            at = off + t.len();
        }
        parts
    }
}
