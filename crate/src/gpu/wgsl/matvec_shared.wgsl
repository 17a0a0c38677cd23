// Needs: the header (OUT_*, RESIDUAL_SCALE), common.wgsl (NEG_BIG, better), a quant/*.wgsl (QK, BLOCK_BYTES),
// mat_common.wgsl (op, out, weight_row), bias.wgsl or no_bias.wgsl, a reduce_*.wgsl (team_sum2),
// best_out.wgsl or no_best.wgsl (put_best), glu_silu.wgsl or glu_gelu.wgsl (glu), the variant's
// OUT_MODE, ROWS and COLS.
// What the decode matrix-vector kernels (matvec.wgsl, matvec_q8.wgsl) share: a workgroup of ROWS
// output rows, a team of TEAM = 256 / ROWS invocations per row, and how a row's sum is written.
// OUT_MODE: OUT_STORE, OUT_ADD to out (the residual, times RESIDUAL_SCALE), OUT_SWIGLU or OUT_GEGLU (glu) of segment 0 (gate)
// and 1 (up) row pairs, OUT_ARGMAX: store, and the workgroup's best row for argmax.wgsl (put_best:
// the output head of greedy decoding).

const TEAM: u32 = 256u / ROWS;
const PAIRED: bool = OUT_MODE == OUT_SWIGLU || OUT_MODE == OUT_GEGLU;

var<workgroup> team_v: array<f32, ROWS>;
var<workgroup> team_i: array<u32, ROWS>;

// Where an invocation works: its workgroup's index, its output row and its lane in the row's team,
// and the byte offsets of the row's weights and (paired) of its pair's. Rows past the end (not
// `valid`) read row 0, in bounds, and store nothing.
struct TeamRow {
    wg_index: u32,
    row: u32,
    lane: u32,
    n_rows: u32,
    valid: bool,
    w: vec2<u32>,
}

fn team_row(lid: u32, wg: vec3<u32>, nwg: vec3<u32>) -> TeamRow {
    let n_rows = select(op.seg_end[op.n_segs - 1u], op.seg_end.x, PAIRED);
    let wg_index = wg.y * nwg.x + wg.x;
    let row = wg_index * ROWS + lid / TEAM;
    let valid = row < n_rows;
    let row_bytes = COLS / QK * BLOCK_BYTES;
    var w = op.seg_off.xy;
    if (valid && PAIRED) {
        w += row * row_bytes;
    } else if (valid) {
        w.x = weight_row(row, row_bytes);
    }
    return TeamRow(wg_index, row, lid % TEAM, n_rows, valid, w);
}

// Sum each team's parts `acc` (row, paired row) and write its row as OUT_MODE says. Every
// invocation of the workgroup calls it (it has barriers).
fn finish_rows(lid: u32, t: TeamRow, acc: vec2<f32>) {
    let wg_index = t.wg_index;
    let row = t.row;
    let valid = t.valid;
    let lane = t.lane;
    let sum = team_sum2(lid, acc, TEAM);
    let v = sum.x;
    if (valid && lane == 0u) {
        let o = op.out_col0 + row;
        if (OUT_MODE == OUT_STORE || OUT_MODE == OUT_ARGMAX) {
            out[o] = v + bias(row);
        } else if (OUT_MODE == OUT_ADD) {
            out[o] += RESIDUAL_SCALE * (v + bias(row));
        } else {
            out[o] = glu(v, sum.y);
        }
    }
    if (OUT_MODE == OUT_ARGMAX) {
        if (lane == 0u) {
            team_v[lid / TEAM] = select(NEG_BIG, v + bias(row), valid);
            team_i[lid / TEAM] = select(0xFFFFFFFFu, op.out_col0 + row, valid);
        }
        workgroupBarrier();
        if (lid == 0u && wg_index * ROWS < t.n_rows) {
            var bv = NEG_BIG;
            var bi = 0xFFFFFFFFu;
            for (var t = 0u; t < ROWS; t++) {
                if (better(team_v[t], team_i[t], bv, bi)) {
                    bv = team_v[t];
                    bi = team_i[t];
                }
            }
            put_best(wg_index, bv, bi);
        }
    }
}
