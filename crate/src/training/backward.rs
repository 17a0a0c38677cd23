//! Steps 2 to 4 of a training step: the trained layers and the head run again from the frozen layers' output,
//! keeping what the backward pass needs (`LayerSaves`), the loss over the response tokens, and the backward pass
//! through the head, the norms, attention, RoPE, SwiGLU and the frozen projections to the gradient of the adapter's
//! weights. In f32 throughout (weights dequantized a row at a time, exact exp), or on the fast path: the forward
//! products on the int8 kernels and `dy·W` on Q8_0 transposed copies of the weights (`Transposed`).

use crate::clock::now_ms;
use crate::kernels::rmsnorm::inv_rms;
use crate::kernels::rope::Rope;
use crate::model::adapter::to_f32;
use crate::model::forward;
use crate::model::lora::Proj;
use crate::model::weights::{LayerWeights, MatrixRef};
use crate::model::Model;
use crate::parallel::for_each_row_chunk;
use crate::quant::{dequantize_row, quantize_row, Activations, GgmlType, QuantMatrix};
use crate::simd::{axpy, dot};

use super::{MicroLora, StepReport, TrainedSite};

/// What one trained layer's forward pass keeps for its backward pass (`T` tokens).
struct LayerSaves {
    x0: Vec<f32>,    // [T × d] residual in
    inv1: Vec<f32>,  // [T] 1/rms of x0
    xb1: Vec<f32>,   // [T × d] attention norm's output
    q: Vec<f32>,     // [T × q_dim] after RoPE
    k: Vec<f32>,     // [T × kv_dim] after RoPE
    v: Vec<f32>,     // [T × kv_dim]
    probs: Vec<f32>, // [heads × T × T] attention weights (0 above the diagonal)
    att: Vec<f32>,   // [T × q_dim]
    x1: Vec<f32>,    // [T × d] residual after attention
    inv2: Vec<f32>,  // [T]
    xb2: Vec<f32>,   // [T × d]
    gate: Vec<f32>,  // [T × ffn] before SiLU
    up: Vec<f32>,    // [T × ffn]
    h: Vec<f32>,     // [T × ffn] silu(gate) * up
    /// Per adapted projection of the layer (indexed by `Proj as usize`): `A·x`, `[T × rank]`.
    u: [Vec<f32>; Proj::ALL.len()],
}

/// One forward (and backward) pass of the trained layers and the head on an example.
pub(super) struct Pass<'a> {
    pub(super) model: &'a Model,
    pub(super) lora: &'a MicroLora,
    pub(super) tokens: &'a [u32],
    pub(super) first_target: usize,
    /// The fast path: the forward products on the int8 kernels, `dy·W` as products with these transposed copies of
    /// the trained layers' weights, and the head's backward pass over the probabilities that carry the gradient.
    /// `None`: everything in f32 from the weights as they are, so that the loss is smooth in the adapter's weights
    /// (what the finite-difference tests check).
    pub(super) fast: Option<&'a [Transposed]>,
}

/// A trained layer's seven weights transposed (`n_in` rows of `n_out`), in Q8_0, indexed by `Proj as usize`; `None`
/// where `n_out` is not a whole number of Q8_0 blocks (tiny test models), which the f32 path then serves.
pub(super) struct Transposed([Option<(Vec<u8>, usize, usize)>; Proj::ALL.len()]);

impl Transposed {
    pub(super) fn of(model: &Model, layer: usize) -> Transposed {
        let (lw, file) = (&model.weights.layers[layer], model.file());
        Transposed(Proj::ALL.map(|p| {
            let w = *weight(lw, p);
            let (rows, cols) = (w.rows, w.cols);
            if rows % GgmlType::Q8_0.block_size() != 0 {
                return None;
            }
            let wf = to_f32(file, w);
            let trb = GgmlType::Q8_0.row_bytes(rows);
            let mut bytes = vec![0u8; cols * trb];
            let mut col = vec![0.0; rows];
            for (k, out) in bytes.chunks_exact_mut(trb).enumerate() {
                col.iter_mut().enumerate().for_each(|(i, v)| *v = wf[i * cols + k]);
                quantize_row(GgmlType::Q8_0, &col, out);
            }
            Some((bytes, cols, rows))
        }))
    }

    fn view(&self, p: Proj) -> Option<QuantMatrix<'_>> {
        let (bytes, rows, cols) = self.0[p as usize].as_ref()?;
        Some(QuantMatrix { ty: GgmlType::Q8_0, rows: *rows, cols: *cols, bytes })
    }
}

/// A layer's weight of projection `p`.
fn weight(lw: &LayerWeights, p: Proj) -> &MatrixRef {
    match p {
        Proj::Q => &lw.wq,
        Proj::K => &lw.wk,
        Proj::V => &lw.wv,
        Proj::O => &lw.wo,
        Proj::Gate => &lw.w_gate,
        Proj::Up => &lw.w_up,
        Proj::Down => &lw.w_down,
    }
}

impl Pass<'_> {
    fn site(&self, layer: usize, proj: Proj) -> Option<&TrainedSite> {
        self.lora.sites.iter().find(|s| s.layer == layer && s.proj == proj)
    }

    fn scale(&self) -> f32 {
        self.lora.options.alpha / self.lora.options.rank as f32
    }

    /// The weight of projection `at` (layer, proj).
    fn weight(&self, at: (usize, Proj)) -> QuantMatrix<'_> {
        weight(&self.model.weights.layers[at.0], at.1).view(self.model.file())
    }

    /// `y = x·Wᵀ` for projection `at` (layer, proj) and the adapter's `s·B·(A·x)` where it adapts it, keeping
    /// `A·x` in `u`.
    fn project(&self, at: (usize, Proj), x: &[f32], n: usize, y: &mut [f32], u: &mut Vec<f32>) {
        self.product(self.weight(at), x, n, y);
        let Some(site) = self.site(at.0, at.1) else { return };
        let (r, theta, s) = (self.lora.options.rank, &self.lora.theta, self.scale());
        *u = vec![0.0; n * r];
        for ((x, y), u) in x.chunks_exact(site.n_in).zip(y.chunks_exact_mut(site.n_out)).zip(u.chunks_exact_mut(r)) {
            for j in 0..r {
                u[j] = dot(&theta[site.a + j * site.n_in..][..site.n_in], x);
                axpy(y, s * u[j], &theta[site.bt + j * site.n_out..][..site.n_out]);
            }
        }
    }

    /// `y = x·Wᵀ` for `n` rows of `x`: on the int8 kernels on the fast path, else in f32.
    fn product(&self, w: QuantMatrix, x: &[f32], n: usize, y: &mut [f32]) {
        if self.fast.is_some() {
            forward::project(&mut Activations::new(), x, n, &mut [(w, y)]);
        } else {
            matmul_f32(&w, x, n, y);
        }
    }

    /// The backward pass of [`Pass::project`] of `at` on input `x` (its layer's saves `sv` hold `A·x`): adds `dy·W`
    /// (and the adapter's part) to `dx` when there is one, and the adapter's gradient to `grad`.
    #[allow(clippy::too_many_arguments)]
    fn project_back(
        &self,
        at: (usize, Proj),
        sv: &LayerSaves,
        x: &[f32],
        dy: &[f32],
        n: usize,
        dx: Option<&mut [f32]>,
        grad: &mut [f32],
    ) {
        let site = self.site(at.0, at.1);
        let u = &sv.u[at.1 as usize];
        let mut dx = dx;
        if let Some(dx) = dx.as_deref_mut() {
            match self.fast.and_then(|t| t[at.0 - self.lora.first_layer].view(at.1)) {
                Some(wt) => {
                    let mut prod = vec![0.0; dx.len()];
                    forward::project(&mut Activations::new(), dy, n, &mut [(wt, &mut prod)]);
                    dx.iter_mut().zip(&prod).for_each(|(d, p)| *d += p);
                }
                None => matmul_t_f32(&self.weight(at), dy, n, dx),
            }
        }
        let Some(site) = site else { return };
        let (r, theta, s) = (self.lora.options.rank, &self.lora.theta, self.scale());
        let mut du = vec![0.0; r];
        for t in 0..n {
            let (x, dy, u) = (&x[t * site.n_in..][..site.n_in], &dy[t * site.n_out..][..site.n_out], &u[t * r..][..r]);
            for j in 0..r {
                du[j] = s * dot(&theta[site.bt + j * site.n_out..][..site.n_out], dy);
                axpy(&mut grad[site.bt + j * site.n_out..][..site.n_out], s * u[j], dy);
                axpy(&mut grad[site.a + j * site.n_in..][..site.n_in], du[j], x);
            }
            if let Some(dx) = dx.as_deref_mut() {
                let dx = &mut dx[t * site.n_in..][..site.n_in];
                for j in 0..r {
                    axpy(dx, du[j], &theta[site.a + j * site.n_in..][..site.n_in]);
                }
            }
        }
    }

    /// The forward pass from the frozen layers' output `x0`, the loss, and (with `grad`) the backward pass.
    pub(super) fn run(&self, x0: &[f32], reward: f32, grad: Option<&mut [f32]>) -> StepReport {
        let t_start = now_ms();
        let (c, w, file) = (&self.model.config, &self.model.weights, self.model.file());
        let n = self.tokens.len();
        let (d, qd, kvd, ff, eps) = (c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim, c.rms_eps);
        let rope = self.model.rope(n);
        let pairs = rope.pairs();
        let mut angles = vec![(0.0, 0.0); n * pairs];
        for (t, a) in angles.chunks_exact_mut(pairs).enumerate() {
            rope.angles(t, a);
        }

        let mut x = x0.to_vec();
        let mut saves = Vec::new();
        for l in self.lora.first_layer..c.n_layers {
            let lw = &w.layers[l];
            let mut sv = LayerSaves {
                x0: x.clone(),
                inv1: vec![0.0; n],
                xb1: vec![0.0; n * d],
                q: vec![0.0; n * qd],
                k: vec![0.0; n * kvd],
                v: vec![0.0; n * kvd],
                probs: vec![0.0; c.n_heads * n * n],
                att: vec![0.0; n * qd],
                x1: vec![0.0; n * d],
                inv2: vec![0.0; n],
                xb2: vec![0.0; n * d],
                gate: vec![0.0; n * ff],
                up: vec![0.0; n * ff],
                h: vec![0.0; n * ff],
                u: Default::default(),
            };
            norm_saving(&sv.x0, &lw.attn_norm, eps, &mut sv.xb1, &mut sv.inv1);
            let [uq, uk, uv, uo, ug, uu, ud] = &mut sv.u;
            self.project((l, Proj::Q), &sv.xb1, n, &mut sv.q, uq);
            self.project((l, Proj::K), &sv.xb1, n, &mut sv.k, uk);
            self.project((l, Proj::V), &sv.xb1, n, &mut sv.v, uv);
            for (buf, bias, dim) in [(&mut sv.q, &lw.bq, qd), (&mut sv.k, &lw.bk, kvd), (&mut sv.v, &lw.bv, kvd)] {
                if let Some(b) = bias {
                    buf.chunks_exact_mut(dim).for_each(|row| row.iter_mut().zip(b).for_each(|(x, b)| *x += b));
                }
            }
            rotate(&rope, &mut sv.q, qd, &angles, false);
            rotate(&rope, &mut sv.k, kvd, &angles, false);
            attention_forward(c.n_heads, c.n_kv_heads, c.head_dim, n, &sv.q, &sv.k, &sv.v, &mut sv.probs, &mut sv.att);
            let mut proj = vec![0.0; n * d];
            self.project((l, Proj::O), &sv.att, n, &mut proj, uo);
            sv.x1.iter_mut().zip(&sv.x0).zip(&proj).for_each(|((x1, x0), p)| *x1 = x0 + p);

            norm_saving(&sv.x1, &lw.ffn_norm, eps, &mut sv.xb2, &mut sv.inv2);
            self.project((l, Proj::Gate), &sv.xb2, n, &mut sv.gate, ug);
            self.project((l, Proj::Up), &sv.xb2, n, &mut sv.up, uu);
            for ((h, &g), &u) in sv.h.iter_mut().zip(&sv.gate).zip(&sv.up) {
                *h = silu(g) * u;
            }
            self.project((l, Proj::Down), &sv.h, n, &mut proj, ud);
            x.iter_mut().zip(&sv.x1).zip(&proj).for_each(|((x, x1), p)| *x = x1 + p);
            saves.push(sv);
        }

        // The head, on the rows that predict a response token: row t predicts tokens[t + 1].
        let rows = self.first_target - 1..n - 1;
        let nl = rows.len();
        let xl = &x[rows.start * d..rows.end * d];
        let (mut xf, mut invf) = (vec![0.0; nl * d], vec![0.0; nl]);
        norm_saving(xl, &w.output_norm, eps, &mut xf, &mut invf);
        let vocab = c.vocab_size;
        let mut logits = vec![0.0; nl * vocab];
        self.product(w.output.view(file), &xf, nl, &mut logits);
        // Softmax, the loss, and (in place) its gradient with respect to the logits.
        let weight = reward.abs() / nl as f32;
        let mut loss = 0.0f64;
        for (row, &target) in logits.chunks_exact_mut(vocab).zip(&self.tokens[self.first_target..]) {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sum: f32 = row
                .iter_mut()
                .map(|v| {
                    *v = (*v - max).exp();
                    *v
                })
                .sum();
            row.iter_mut().for_each(|v| *v /= sum);
            let p = row[target as usize];
            if reward > 0.0 {
                // d(-log p_y)/dz = p - onehot(y)
                loss -= (p.max(f32::MIN_POSITIVE) as f64).ln();
                row[target as usize] -= 1.0;
                row.iter_mut().for_each(|g| *g *= weight);
            } else {
                // d(-log(1 - p_y))/dz_j = p_y/(1 - p_y) · (onehot(y)_j - p_j)
                let rest = (1.0 - p).max(1e-6);
                loss -= (rest as f64).ln();
                let k = weight * p / rest;
                row.iter_mut().for_each(|g| *g *= -k);
                row[target as usize] += k;
            }
        }
        let mut report = StepReport { loss: (loss as f32) * weight, tokens: nl, ..StepReport::default() };
        let t_forward = now_ms();
        report.forward_ms = t_forward - t_start;
        let Some(grad) = grad else { return report };

        // Backward: the head, then the layers from the last.
        let mut dxf = vec![0.0; nl * d];
        if self.fast.is_some() {
            sparse_matmul_t(&w.output.view(file), &logits, nl, &mut dxf);
        } else {
            matmul_t_f32(&w.output.view(file), &logits, nl, &mut dxf);
        }
        let mut dx = vec![0.0; n * d];
        norm_back(xl, &invf, &w.output_norm, &dxf, &mut dx[rows.start * d..rows.end * d]);
        for (i, sv) in saves.iter().enumerate().rev() {
            let l = self.lora.first_layer + i;
            let lw = &w.layers[l];
            let first = i == 0;
            // Feed-forward block: dx is the gradient of x = x1 + Wd·h.
            let mut dh = vec![0.0; n * ff];
            self.project_back((l, Proj::Down), sv, &sv.h, &dx, n, Some(&mut dh), grad);
            let (mut dgate, mut dup) = (vec![0.0; n * ff], vec![0.0; n * ff]);
            for i in 0..n * ff {
                let (g, sig) = (sv.gate[i], sigmoid(sv.gate[i]));
                dup[i] = dh[i] * g * sig;
                dgate[i] = dh[i] * sv.up[i] * sig * (1.0 + g * (1.0 - sig));
            }
            let mut dxb2 = vec![0.0; n * d];
            self.project_back((l, Proj::Gate), sv, &sv.xb2, &dgate, n, Some(&mut dxb2), grad);
            self.project_back((l, Proj::Up), sv, &sv.xb2, &dup, n, Some(&mut dxb2), grad);
            norm_back(&sv.x1, &sv.inv2, &lw.ffn_norm, &dxb2, &mut dx);
            // Attention block: dx is now the gradient of x1 = x0 + Wo·att.
            let mut datt = vec![0.0; n * qd];
            self.project_back((l, Proj::O), sv, &sv.att, &dx, n, Some(&mut datt), grad);
            let (mut dq, mut dk, mut dv) = (vec![0.0; n * qd], vec![0.0; n * kvd], vec![0.0; n * kvd]);
            attention_backward(c.n_heads, c.n_kv_heads, c.head_dim, n, sv, &datt, &mut dq, &mut dk, &mut dv);
            rotate(&rope, &mut dq, qd, &angles, true);
            rotate(&rope, &mut dk, kvd, &angles, true);
            // The first trained layer's input takes no gradient: only its adapters' weights do.
            let mut dxb1 = (!first).then(|| vec![0.0; n * d]);
            for (p, dy) in [(Proj::Q, &dq), (Proj::K, &dk), (Proj::V, &dv)] {
                self.project_back((l, p), sv, &sv.xb1, dy, n, dxb1.as_deref_mut(), grad);
            }
            if let Some(dxb1) = dxb1 {
                norm_back(&sv.x0, &sv.inv1, &lw.attn_norm, &dxb1, &mut dx);
            }
        }
        report.backward_ms = now_ms() - t_forward;
        report
    }
}

fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// RMSNorm of each row of `x` into `out`, keeping each row's `1/rms` in `inv`.
fn norm_saving(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32], inv: &mut [f32]) {
    let d = weight.len();
    for ((x, out), inv) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)).zip(inv.iter_mut()) {
        *inv = inv_rms(x, eps);
        for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
            *o = v * *inv * w;
        }
    }
}

/// `dx += ∂/∂x` of RMSNorm rows `y = x·r·w` given `dy`: `r·w·dy - x·r³·Σ(w·dy·x)/d`.
fn norm_back(x: &[f32], inv: &[f32], weight: &[f32], dy: &[f32], dx: &mut [f32]) {
    let d = weight.len();
    for (((x, &r), dy), dx) in x.chunks_exact(d).zip(inv).zip(dy.chunks_exact(d)).zip(dx.chunks_exact_mut(d)) {
        let dot: f32 = x.iter().zip(dy).zip(weight).map(|((x, dy), w)| x * dy * w).sum();
        let k = r * r * r * dot / d as f32;
        for (((dx, &x), &dy), &w) in dx.iter_mut().zip(x).zip(dy).zip(weight) {
            *dx += r * w * dy - x * k;
        }
    }
}

/// RoPE on every row of `x` (rows of `dim`, token `t` at position `t`), or its transpose (`back`: the
/// rotation by the opposite angle, for gradients).
fn rotate(rope: &Rope, x: &mut [f32], dim: usize, angles: &[(f32, f32)], back: bool) {
    let pairs = rope.pairs();
    let mut conj = vec![(0.0, 0.0); pairs];
    for (t, row) in x.chunks_exact_mut(dim).enumerate() {
        let a = &angles[t * pairs..][..pairs];
        if back {
            conj.iter_mut().zip(a).for_each(|(c, &(cos, sin))| *c = (cos, -sin));
            rope.rotate(row, &conj);
        } else {
            rope.rotate(row, a);
        }
    }
}

/// Causal attention of `n` tokens at positions `0..n` in f32, keeping the softmax weights in `probs`.
#[allow(clippy::too_many_arguments)]
fn attention_forward(
    heads: usize,
    kv_heads: usize,
    hd: usize,
    n: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    probs: &mut [f32],
    out: &mut [f32],
) {
    let (qd, kvd, group, scale) = (heads * hd, kv_heads * hd, heads / kv_heads, 1.0 / (hd as f32).sqrt());
    for h in 0..heads {
        let g = h / group;
        for t in 0..n {
            let qt = &q[t * qd + h * hd..][..hd];
            let p = &mut probs[(h * n + t) * n..][..t + 1];
            for (j, p) in p.iter_mut().enumerate() {
                *p = dot(qt, &k[j * kvd + g * hd..][..hd]) * scale;
            }
            let max = p.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sum: f32 = p
                .iter_mut()
                .map(|v| {
                    *v = (*v - max).exp();
                    *v
                })
                .sum();
            let o = &mut out[t * qd + h * hd..][..hd];
            o.fill(0.0);
            for (j, p) in p.iter_mut().enumerate() {
                *p /= sum;
                axpy(o, *p, &v[j * kvd + g * hd..][..hd]);
            }
        }
    }
}

/// The backward pass of [`attention_forward`]: `dq`, `dk`, `dv` from `datt`.
#[allow(clippy::too_many_arguments)]
fn attention_backward(
    heads: usize,
    kv_heads: usize,
    hd: usize,
    n: usize,
    sv: &LayerSaves,
    datt: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let (qd, kvd, group, scale) = (heads * hd, kv_heads * hd, heads / kv_heads, 1.0 / (hd as f32).sqrt());
    let mut ds = vec![0.0; n];
    for h in 0..heads {
        let g = h / group;
        for t in 0..n {
            let p = &sv.probs[(h * n + t) * n..][..t + 1];
            let d_o = &datt[t * qd + h * hd..][..hd];
            // dP_j = dO·v_j, dv_j += P_j·dO; dS_j = P_j·(dP_j - Σ P·dP).
            let mut sum = 0.0;
            for (j, &pj) in p.iter().enumerate() {
                let dp = dot(d_o, &sv.v[j * kvd + g * hd..][..hd]);
                axpy(&mut dv[j * kvd + g * hd..][..hd], pj, d_o);
                ds[j] = dp;
                sum += pj * dp;
            }
            let qt = &sv.q[t * qd + h * hd..][..hd];
            for (j, &pj) in p.iter().enumerate() {
                let s = pj * (ds[j] - sum) * scale;
                axpy(&mut dq[t * qd + h * hd..][..hd], s, &sv.k[j * kvd + g * hd..][..hd]);
                axpy(&mut dk[j * kvd + g * hd..][..hd], s, qt);
            }
        }
    }
}

/// `y = x·Wᵀ` for `n` rows of `x`, in f32 with `W` dequantized a row at a time; the threads share `W`'s rows.
fn matmul_f32(w: &QuantMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    let (rows, cols, rb) = (w.rows, w.cols, w.row_bytes());
    let mut yt = vec![0.0; rows * n];
    for_each_row_chunk(&mut yt, n, |i0, out| {
        let mut row = vec![0.0; cols];
        for (i, out) in out.chunks_exact_mut(n).enumerate() {
            dequantize_row(w.ty, &w.bytes[(i0 + i) * rb..][..rb], &mut row);
            for (t, o) in out.iter_mut().enumerate() {
                *o = dot(&row, &x[t * cols..][..cols]);
            }
        }
    });
    for (i, col) in yt.chunks_exact(n).enumerate() {
        for (t, &v) in col.iter().enumerate() {
            y[t * rows + i] = v;
        }
    }
}

/// Of a row of gradients, what the entries below the threshold this returns add up to at most (as a share of the
/// row's absolute sum): the head's gradient is a softmax's, nearly all of whose mass is on a few hundred tokens.
const DROPPED_SHARE: f32 = 1e-3;

/// [`matmul_t_f32`] over the entries of each row of `dy` that carry all but [`DROPPED_SHARE`] of its absolute sum
/// (each weight row is dequantized once, if any row needs it).
fn sparse_matmul_t(w: &QuantMatrix, dy: &[f32], n: usize, dx: &mut [f32]) {
    let (rows, cols, rb) = (w.rows, w.cols, w.row_bytes());
    // Per row of dy: a threshold from a histogram of the entries' binary exponents.
    let thresholds: Vec<f32> = dy
        .chunks_exact(rows)
        .map(|g| {
            let mut mass = [0f32; 256];
            let mut total = 0.0;
            for v in g {
                mass[((v.to_bits() >> 23) & 0xff) as usize] += v.abs();
                total += v.abs();
            }
            // The smallest exponents go while what they hold stays under the budget.
            let (mut dropped, mut keep_from) = (0.0, 0);
            for (e, m) in mass.iter().enumerate() {
                if dropped + m > DROPPED_SHARE * total {
                    keep_from = e;
                    break;
                }
                dropped += m;
            }
            f32::from_bits((keep_from as u32) << 23)
        })
        .collect();
    let mut row = vec![0.0; cols];
    for i in 0..rows {
        if !(0..n).any(|t| dy[t * rows + i].abs() >= thresholds[t]) {
            continue;
        }
        dequantize_row(w.ty, &w.bytes[i * rb..][..rb], &mut row);
        for t in 0..n {
            let g = dy[t * rows + i];
            if g.abs() >= thresholds[t] {
                axpy(&mut dx[t * cols..][..cols], g, &row);
            }
        }
    }
}

/// `dx += dy·W` for `n` rows of `dy`, in f32; the threads share the rows of `dx` (each dequantizes all of `W`).
fn matmul_t_f32(w: &QuantMatrix, dy: &[f32], n: usize, dx: &mut [f32]) {
    let (rows, cols, rb) = (w.rows, w.cols, w.row_bytes());
    debug_assert_eq!(dx.len(), n * cols);
    for_each_row_chunk(dx, cols, |t0, dx| {
        let mut row = vec![0.0; cols];
        let nt = dx.len() / cols;
        for i in 0..rows {
            dequantize_row(w.ty, &w.bytes[i * rb..][..rb], &mut row);
            for t in 0..nt {
                let g = dy[(t0 + t) * rows + i];
                if g != 0.0 {
                    axpy(&mut dx[t * cols..][..cols], g, &row);
                }
            }
        }
    });
}

// The backward pass against finite differences of the same loss, on the tiny models the fixture script writes
// (natively: the wasm32 suites read no files from here).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::tests::tiny;
    use super::super::MicroLoraOptions;
    use super::*;
    use crate::test_support::{test, Rng};

    /// The loss with the weights moved by `step` along `dir`.
    fn loss_at(
        lora: &mut MicroLora,
        model: &Model,
        tokens: &[u32],
        first: usize,
        reward: f32,
        dir: &[f32],
        step: f32,
    ) -> f64 {
        let theta = lora.theta.clone();
        lora.theta.iter_mut().zip(dir).for_each(|(t, d)| *t += step * d);
        let (x0, _) = lora.frozen(model, tokens);
        let loss = Pass { model, lora, tokens, first_target: first, fast: None }.run(&x0, reward, None).loss;
        lora.theta = theta;
        loss as f64
    }

    fn gradient(lora: &mut MicroLora, model: &Model, tokens: &[u32], first: usize, reward: f32) -> Vec<f32> {
        let (x0, _) = lora.frozen(model, tokens);
        let mut grad = vec![0.0; lora.theta.len()];
        Pass { model, lora, tokens, first_target: first, fast: None }.run(&x0, reward, Some(&mut grad));
        grad
    }

    #[test]
    fn the_gradient_is_the_loss_finite_differences() {
        for file in ["tiny-llama-spm.gguf", "tiny-qwen2.gguf"] {
            let model = tiny(file);
            let vocab = model.config.vocab_size as u64;
            let options = MicroLoraOptions {
                rank: 3,
                layers: 2,
                projections: Proj::ALL.to_vec(),
                learning_rate: 2e-2,
                seed: 7,
                ..MicroLoraOptions::default()
            };
            let mut lora = MicroLora::new(&model, options).unwrap();
            let mut rng = Rng::new(3);
            let tokens: Vec<u32> = (0..24).map(|_| (rng.next_u64() % vocab) as u32).collect();
            // B starts at 0, where A's gradient is 0: a few steps first, so that every weight takes part.
            for _ in 0..3 {
                lora.train_step(&model, &tokens, 10, 1.0).unwrap();
            }
            for reward in [1.0, -0.5] {
                let grad = gradient(&mut lora, &model, &tokens, 10, reward);
                // Along a random direction through all weights, and through each site's A and B alone.
                let mut dirs = vec![(0..lora.theta.len()).map(|_| rng.normal()).collect::<Vec<f32>>()];
                for s in &lora.sites {
                    for range in [s.a..s.bt, s.bt..s.bt + lora.options.rank * s.n_out] {
                        let mut d = vec![0.0; lora.theta.len()];
                        d[range.clone()].iter_mut().for_each(|v| *v = rng.normal());
                        dirs.push(d);
                    }
                }
                for (i, dir) in dirs.iter().enumerate() {
                    let norm = dir.iter().map(|v| v * v).sum::<f32>().sqrt();
                    let dir: Vec<f32> = dir.iter().map(|v| v / norm).collect();
                    let analytic: f64 = grad.iter().zip(&dir).map(|(g, d)| (*g as f64) * (*d as f64)).sum();
                    let h = 1e-2;
                    let numeric = (loss_at(&mut lora, &model, &tokens, 10, reward, &dir, h)
                        - loss_at(&mut lora, &model, &tokens, 10, reward, &dir, -h))
                        / (2.0 * h as f64);
                    let err = (analytic - numeric).abs();
                    assert!(
                        err <= 3e-4 + 0.01 * numeric.abs(),
                        "{file}, reward {reward}, direction {i}: backward {analytic:.6}, finite differences {numeric:.6}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_fast_path_gives_the_exact_loss_and_gradient_within_int8_rounding() {
        for file in ["tiny-llama-spm.gguf", "tiny-qwen2.gguf"] {
            let model = tiny(file);
            let vocab = model.config.vocab_size as u64;
            let options =
                MicroLoraOptions { rank: 2, layers: 2, projections: Proj::ALL.to_vec(), ..Default::default() };
            let mut lora = MicroLora::new(&model, options).unwrap();
            let mut rng = Rng::new(5);
            let tokens: Vec<u32> = (0..32).map(|_| (rng.next_u64() % vocab) as u32).collect();
            for _ in 0..3 {
                lora.train_step(&model, &tokens, 12, 1.0).unwrap();
            }
            let exact = gradient(&mut lora, &model, &tokens, 12, 1.0);
            let fast_path = lora.fast_path(&model);
            let (x0, _) = lora.frozen(&model, &tokens);
            let mut fast = vec![0.0; exact.len()];
            let pass = Pass { model: &model, lora: &lora, tokens: &tokens, first_target: 12, fast: Some(&fast_path) };
            let fast_loss = pass.run(&x0, 1.0, Some(&mut fast)).loss;
            let exact_loss = loss_at(&mut lora, &model, &tokens, 12, 1.0, &vec![0.0; exact.len()], 0.0);
            assert!(
                (fast_loss as f64 - exact_loss).abs() < 0.01 * exact_loss,
                "{file}: loss {fast_loss} vs {exact_loss}"
            );
            let dot: f64 = exact.iter().zip(&fast).map(|(a, b)| (*a as f64) * (*b as f64)).sum();
            let norm = |g: &[f32]| g.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
            let cosine = dot / (norm(&exact) * norm(&fast));
            assert!(cosine > 0.99, "{file}: cosine {cosine}, norms {} {}", norm(&exact), norm(&fast));
        }
    }
}
