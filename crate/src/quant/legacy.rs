//! PLACEHOLDER until the legacy-quant work lands: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32).
use super::act::{ActKind, BlockQ8_0, BlockQ8_1};
use super::QuantBlock;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ4_0 { pub d: [u8; 2], pub qs: [u8; 16] }
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ4_1 { pub d: [u8; 2], pub m: [u8; 2], pub qs: [u8; 16] }
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ5_0 { pub d: [u8; 2], pub qh: [u8; 4], pub qs: [u8; 16] }
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ5_1 { pub d: [u8; 2], pub m: [u8; 2], pub qh: [u8; 4], pub qs: [u8; 16] }

macro_rules! todo_block { ($B:ident, $act:ident, $A:ty) => {
    impl QuantBlock for $B {
        const ELEMS: usize = 32; const ACT: ActKind = ActKind::$act; type Act = $A;
        fn dequantize(_: &[Self], _: &mut [f32]) { todo!() }
        fn quantize(_: &[f32], _: &mut [Self]) { todo!() }
        fn vec_dot_ref(_: &[Self], _: &[$A]) -> f32 { todo!() }
    }
}}
todo_block!(BlockQ4_0, Q8_0, BlockQ8_0);
todo_block!(BlockQ4_1, Q8_1, BlockQ8_1);
todo_block!(BlockQ5_0, Q8_0, BlockQ8_0);
todo_block!(BlockQ5_1, Q8_1, BlockQ8_1);
todo_block!(BlockQ8_0, Q8_0, BlockQ8_0);
