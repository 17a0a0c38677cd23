//! The uniform structs the kernels read, each declared once: [`uniform!`] makes the Rust struct
//! (plain bytes through `bytemuck`) and the WGSL declaration a kernel's module gets from it.

/// A field type of a uniform struct: its WGSL name and alignment in a uniform buffer.
pub(crate) trait WgslType {
    const NAME: &'static str;
    const ALIGN: usize;
}

impl WgslType for u32 {
    const NAME: &'static str = "u32";
    const ALIGN: usize = 4;
}

impl WgslType for [u32; 4] {
    const NAME: &'static str = "vec4<u32>";
    const ALIGN: usize = 16;
}

/// A struct a kernel reads from a uniform binding.
pub(crate) trait Uniform: bytemuck::Pod {
    /// Its WGSL declaration, from the same field list as the Rust struct.
    fn wgsl() -> String;
}

/// Declares a uniform struct for Rust and WGSL at once. WGSL places each field at a multiple of
/// its alignment and rounds the size up to the largest: the compile-time checks below make sure
/// the Rust layout (`repr(C)`, no padding: `Pod`) needs no such rounding, so both agree byte for
/// byte.
macro_rules! uniform {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
        $vis struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $crate::gpu::ops::params::Uniform for $name {
            fn wgsl() -> String {
                use $crate::gpu::ops::params::WgslType;
                let mut s = format!("struct {} {{\n", stringify!($name));
                $(s += &format!("    {}: {},\n", stringify!($field), <$ty as WgslType>::NAME);)*
                s + "}\n"
            }
        }

        const _: () = {
            use $crate::gpu::ops::params::WgslType;
            let mut align = 4;
            $(
                assert!(std::mem::offset_of!($name, $field) % <$ty as WgslType>::ALIGN == 0);
                if <$ty as WgslType>::ALIGN > align {
                    align = <$ty as WgslType>::ALIGN;
                }
            )*
            assert!(std::mem::size_of::<$name>() % align == 0);
        };
    };
}
pub(crate) use uniform;

uniform! {
    /// A forward call's parameters, every kernel's uniform `call`: written once per call.
    pub(crate) struct CallParams {
        /// Tokens in this call.
        n: u32,
        /// Position of the first of them.
        pos0: u32,
        /// Cached positions after this call (`pos0 + n`).
        kv_len: u32,
        /// Keys per workgroup of decode attention.
        chunk: u32,
        /// Decode attention workgroups per head.
        n_chunks: u32,
        /// The logits row argmax reads.
        logit_row: u32,
        /// Where argmax stores the id in the ids buffer.
        slot: u32,
        /// Keys per workgroup of prefill attention (a multiple of its tile).
        split_keys: u32,
        /// Prefill attention workgroups per query block and head; above 1 its partials are merged.
        n_splits: u32,
        pad0: u32,
        pad1: u32,
        pad2: u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    uniform! {
        struct Mixed {
            a: [u32; 4],
            b: u32,
            c: u32,
            d: u32,
            e: u32,
        }
    }

    #[test]
    fn wgsl_declaration_lists_the_rust_fields_in_order() {
        assert_eq!(
            Mixed::wgsl(),
            "struct Mixed {\n    a: vec4<u32>,\n    b: u32,\n    c: u32,\n    d: u32,\n    e: u32,\n}\n"
        );
        assert_eq!(std::mem::size_of::<CallParams>(), 48);
        assert_eq!(bytemuck::bytes_of(&CallParams { n: 1, slot: 2, ..CallParams::default() })[..4], 1u32.to_le_bytes());
    }
}
