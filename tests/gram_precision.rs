//! The Gram path at a real vocabulary size (50257, GPT-2's), against plain float64 loops: the
//! Gram matrices from `Grams::compute` (f32 weights widened a block at a time, the CPU
//! backend's blocked gemm) against dot products summed one by one, and the token-space
//! fingerprints of every head (OV and QK) against the same circuits built from those loop Grams.
//!
//! This test is why the Grams are f64: with f32 Grams and f32 per-head products, the Grams stay
//! close but κ of the OV circuit comes out percents off (docs/methods.md#1-conventions,
//! Precision), because the embedding's common direction makes W_V^T G_E W_V ill-conditioned.

use crate::common;

use common::{TOLERANCE, assert_close};
use headprint::analysis::circuits::Grams;
use headprint::analysis::{Circuits, Factored, Fingerprint, HeadId, Mode};
use headprint::model::{Activation, Attention, Layer, MlpKind, Model, ModelConfig, Norm, NormKind, Positions};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const VOCAB: usize = 50257;
const D_MODEL: usize = 128;
const HEADS: usize = 2;

fn uniform(rows: usize, cols: usize, scale: f32, rng: &mut ChaCha8Rng) -> DMatrix<f32> {
    DMatrix::from_fn(rows, cols, |_, _| scale * rng.random_range(-1.0f32..1.0))
}

fn norm(rng: &mut ChaCha8Rng) -> Norm {
    Norm {
        weight: DVector::from_fn(D_MODEL, |_, _| 1.0 + 0.3 * rng.random_range(-1.0f32..1.0)),
        bias: Some(DVector::from_fn(D_MODEL, |_, _| 0.1 * rng.random_range(-1.0f32..1.0))),
    }
}

/// A one-layer GPT-2-shaped model with an untied unembedding (so all three Grams are used).
/// Embedding rows share a common direction, as trained embeddings do: it makes the Gram's
/// entries sums of many same-signed terms, the hard case for f32 accumulation.
fn model(rng: &mut ChaCha8Rng) -> Model {
    let common = uniform(1, D_MODEL, 1.0, rng);
    let mut w_e = uniform(VOCAB, D_MODEL, 0.5, rng);
    for mut row in w_e.row_iter_mut() {
        row += &common;
    }
    let mut w_u = uniform(D_MODEL, VOCAB, 0.5, rng);
    let unembed_common = uniform(D_MODEL, 1, 0.7, rng);
    for mut column in w_u.column_iter_mut() {
        column += &unembed_common;
    }
    let weight = |rng: &mut ChaCha8Rng| uniform(D_MODEL, D_MODEL, 1.0 / (D_MODEL as f32).sqrt(), rng);
    let attention = Attention {
        w_q: weight(rng),
        b_q: DVector::zeros(D_MODEL),
        w_k: weight(rng),
        b_k: DVector::zeros(D_MODEL),
        w_v: weight(rng),
        b_v: DVector::zeros(D_MODEL),
        w_o: weight(rng),
        b_o: DVector::zeros(D_MODEL),
        q_norm: None,
        k_norm: None,
    };
    Model {
        config: ModelConfig {
            family: "gpt2".into(),
            layers: 1,
            heads: HEADS,
            kv_heads: HEADS,
            d_model: D_MODEL,
            d_head: D_MODEL / HEADS,
            d_mlp: 4 * D_MODEL,
            vocab: VOCAB,
            context: Some(64),
            norm: NormKind::LayerNorm,
            norm_eps: 1e-5,
            positions: Positions::Learned,
            mlp: MlpKind::Plain(Activation::GeluTanh),
            parallel_residual: false,
            features: Default::default(),
            bos_token_id: None,
            config_special_ids: Vec::new(),
            characters: false,
        },
        w_e,
        w_pos: None,
        embedding_norm: None,
        layers: vec![Layer {
            ln1: Some(norm(rng)),
            attention,
            ln2: Some(norm(rng)),
            attention_out_norm: None,
            mlp_out_norm: None,
            mlp: None,
            experts: None,
        }],
        ln_final: norm(rng),
        w_u: Some(w_u),
        b_u: None,
        vocab_strings: None,
        facts: Vec::new(),
        parameter_count: 0,
    }
}

/// `X^T Y` for X, Y with VOCAB rows, by a plain f64 loop (no gemm).
fn gram_f64(x: &DMatrix<f64>, y: &DMatrix<f64>) -> DMatrix<f64> {
    DMatrix::from_fn(x.ncols(), y.ncols(), |i, j| {
        let (a, b) = (x.column(i), y.column(j));
        let mut sum = 0.0;
        for v in 0..x.nrows() {
            sum += a[v] * b[v];
        }
        sum
    })
}

/// ‖got − want‖_F / ‖want‖_F.
fn relative_error(got: &DMatrix<f64>, want: &DMatrix<f64>) -> f64 {
    (got - want).norm() / want.norm()
}

/// κ of the token-space circuits is held to this relative tolerance (as in tests/reference.rs).
const KAPPA_TOLERANCE: f64 = TOLERANCE;

/// Checks two fingerprints against each other and returns the largest relative differences:
/// (eigenvalues and the other metrics, κ).
fn compare(got: &Fingerprint, want: &Fingerprint, what: &str) -> (f64, f64) {
    assert!(got.error.is_none() && want.error.is_none(), "{what}: {:?} {:?}", got.error, want.error);
    let largest = want.eigenvalues.iter().map(|l| l.abs()).fold(0.0, f64::max);
    let mut worst: f64 = 0.0;
    let mut unused = got.eigenvalues.clone();
    for w in &want.eigenvalues {
        let (index, distance) = unused
            .iter()
            .enumerate()
            .map(|(i, g)| (i, (g.re - w.re).hypot(g.im - w.im)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        assert!(distance <= TOLERANCE * largest, "{what}: eigenvalue {w:?} off by {distance:e}");
        worst = worst.max(distance / largest);
        unused.remove(index);
    }
    // The three fractions lie in [-1, 1]: compared absolutely (floor 1); scale relatively.
    for (metric, g, w, floor) in [
        ("copying score", got.copying_score, want.copying_score, 1.0),
        ("imaginary fraction", got.imaginary_fraction, want.imaginary_fraction, 1.0),
        ("departure", got.departure_from_normality, want.departure_from_normality, 1.0),
        ("scale", got.scale, want.scale, 1e-2),
    ] {
        assert_close(g, w, floor, &format!("{what} {metric}"));
        worst = worst.max((g - w).abs() / w.abs().max(floor));
    }
    let (g, w) = (got.eigenvector_condition.expect("finite κ"), want.eigenvector_condition.expect("finite κ"));
    let kappa_error = (g - w).abs() / w;
    assert!(kappa_error <= KAPPA_TOLERANCE, "{what} κ: got {g}, expected {w} ({kappa_error:e} relative)");
    (worst, kappa_error)
}

#[test]
fn grams_at_gpt2_vocabulary_match_float64_loops() {
    let mut rng = ChaCha8Rng::seed_from_u64(50257);
    let model = model(&mut rng);
    let grams = Grams::compute(&model);
    assert!(!grams.tied);

    let w_e = model.w_e.map(f64::from);
    let w_u_t = model.w_u.as_ref().unwrap().transpose().map(f64::from);
    let embed = gram_f64(&w_e, &w_e);
    let cross = gram_f64(&w_u_t, &w_e); // W_U W_E
    let unembed = gram_f64(&w_u_t, &w_u_t);
    let errors = [
        ("W_E^T W_E", relative_error(&grams.embed, &embed)),
        ("W_U W_E", relative_error(&grams.cross, &cross)),
        ("W_U W_U^T", relative_error(&grams.unembed, &unembed)),
    ];
    for (what, error) in errors {
        eprintln!("{what}: relative Frobenius error of the Gram {error:.2e}");
        assert!(error < 1e-12, "{what}: Gram off by {error:e} relative");
    }

    // The token-space circuits of every head, from the engine's Grams and from the loop ones.
    for mode in [Mode::Folded, Mode::Raw] {
        let circuits = Circuits::new(&model, &grams, mode);
        for head in 0..HEADS {
            let id = HeadId::new(0, head);
            let w = circuits.head_weights(id);
            let o_hat = &w.w_o_unembed;
            let ov = Factored {
                small: o_hat * &cross * &w.w_v,
                gram_left: w.w_v.transpose() * &embed * &w.w_v,
                gram_right: o_hat * &unembed * o_hat.transpose(),
            };
            let qk = Factored {
                small: w.w_k.transpose() * &embed * &w.w_q,
                gram_left: w.w_q.transpose() * &embed * &w.w_q,
                gram_right: w.w_k.transpose() * &embed * &w.w_k,
            };
            let what = format!("{} {id}", mode.name());
            let (ov_error, ov_kappa) = compare(
                &circuits.ov_token(&w).fingerprint().unwrap(),
                &ov.fingerprint().unwrap(),
                &format!("{what} OV"),
            );
            let (qk_error, qk_kappa) = compare(
                &circuits.qk_token(&w).fingerprint().unwrap(),
                &qk.fingerprint().unwrap(),
                &format!("{what} QK (tokens)"),
            );
            eprintln!(
                "{what}: largest relative error of eigenvalues and metrics / of κ: OV (tokens) {ov_error:.2e} / \
                 {ov_kappa:.2e}, QK (tokens) {qk_error:.2e} / {qk_kappa:.2e}"
            );
        }
    }
}
