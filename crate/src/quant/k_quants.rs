//! PLACEHOLDER until the K-quant work lands: Q2_K..Q6_K (super-blocks of 256).
use super::act::{ActKind, BlockQ8K};
use super::QuantBlock;

#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ2K { pub scales: [u8; 16], pub qs: [u8; 64], pub d: [u8; 2], pub dmin: [u8; 2] }
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ3K { pub hmask: [u8; 32], pub qs: [u8; 64], pub scales: [u8; 12], pub d: [u8; 2] }
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ4K { pub d: [u8; 2], pub dmin: [u8; 2], pub scales: [u8; 12], pub qs: [u8; 128] }
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ5K { pub d: [u8; 2], pub dmin: [u8; 2], pub scales: [u8; 12], pub qh: [u8; 32], pub qs: [u8; 128] }
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ6K { pub ql: [u8; 128], pub qh: [u8; 64], pub scales: [i8; 16], pub d: [u8; 2] }

macro_rules! todo_block { ($B:ident) => {
    impl QuantBlock for $B {
        const ELEMS: usize = 256; const ACT: ActKind = ActKind::Q8K; type Act = BlockQ8K;
        fn dequantize(_: &[Self], _: &mut [f32]) { todo!() }
        fn quantize(_: &[f32], _: &mut [Self]) { todo!() }
        fn vec_dot_ref(_: &[Self], _: &[BlockQ8K]) -> f32 { todo!() }
    }
}}
todo_block!(BlockQ2K); todo_block!(BlockQ3K); todo_block!(BlockQ4K); todo_block!(BlockQ5K); todo_block!(BlockQ6K);
