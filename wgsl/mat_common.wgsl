// Declarations shared by matvec.wgsl, matmul.wgsl and split_reduce.wgsl.

struct MatParams {
    seg_off: vec4<u32>,  // byte offset in W of each segment's first row
    seg_end: vec4<u32>,  // cumulative row counts: segment s has output rows seg_end[s-1]..seg_end[s]
    cols: u32,
    out_stride: u32,     // floats between the output rows of consecutive tokens (matmul)
    out_col0: u32,       // output column of this op's first row
    n_segs: u32,
    k_len: u32,          // matmul split over the columns: columns per split (cols when not split)
    splits: u32,         // number of splits (split_reduce.wgsl sums their partial products)
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(1) var<uniform> op: MatParams;
@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// Byte offset of the weights of output row r (r < total rows).
fn weight_row(r: u32, row_bytes: u32) -> u32 {
    var s = 0u;
    var start = 0u;
    for (var i = 1u; i < op.n_segs; i++) {
        if (r >= op.seg_end[i - 1u]) {
            s = i;
            start = op.seg_end[i - 1u];
        }
    }
    return op.seg_off[s] + (r - start) * row_bytes;
}

