//! MicroLoRA in JavaScript (wasm32 only): an `Engine` trains adapters of its model from feedback (`training`).
//!
//! A MicroLoRA has an adapter id like a loaded adapter file's: `start`'s `adapters` option applies it with its
//! weights as they are when the generation starts. A training step is a forward and backward pass: in the threaded
//! build it runs on the pool and returns a Promise, as generation does. Its state goes out as bytes (`save`, for the
//! package's stores) and as llama.cpp's GGUF adapter file (`export`), and comes back from the bytes (`open`).

use std::sync::PoisonError;

use serde::Deserialize;
use wasm_bindgen::prelude::*;

use crate::error::Error;
use crate::model::lora::Proj;
use crate::training::{MicroLora, MicroLoraOptions};
use crate::wasm::{bytes_from_js, idle, js_error, json, parse, run_job, Engine};

/// `createMicroLora`'s options; what is absent is `MicroLoraOptions::default()`'s.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsMicroLoraOptions {
    rank: Option<usize>,
    layers: Option<usize>,
    /// Of "q", "k", "v", "o", "gate", "up", "down".
    projections: Option<Vec<String>>,
    alpha: Option<f32>,
    learning_rate: Option<f32>,
    ewc_lambda: Option<f32>,
    fisher_decay: Option<f32>,
    seed: Option<u64>,
}

impl JsMicroLoraOptions {
    fn into_options(self) -> crate::Result<MicroLoraOptions> {
        let d = MicroLoraOptions::default();
        let projections = match self.projections {
            None => d.projections,
            Some(names) => names.iter().map(|n| proj(n)).collect::<crate::Result<_>>()?,
        };
        Ok(MicroLoraOptions {
            rank: self.rank.unwrap_or(d.rank),
            layers: self.layers.unwrap_or(d.layers),
            projections,
            alpha: self.alpha.unwrap_or(d.alpha),
            learning_rate: self.learning_rate.unwrap_or(d.learning_rate),
            ewc_lambda: self.ewc_lambda.unwrap_or(d.ewc_lambda),
            fisher_decay: self.fisher_decay.unwrap_or(d.fisher_decay),
            seed: self.seed.unwrap_or(d.seed),
        })
    }
}

const PROJECTIONS: [(&str, Proj); 7] = [
    ("q", Proj::Q),
    ("k", Proj::K),
    ("v", Proj::V),
    ("o", Proj::O),
    ("gate", Proj::Gate),
    ("up", Proj::Up),
    ("down", Proj::Down),
];

fn proj(name: &str) -> crate::Result<Proj> {
    match PROJECTIONS.iter().find(|(n, _)| *n == name) {
        Some((_, p)) => Ok(*p),
        None => Err(Error::InvalidArgument(format!("projection '{name}' is not one of q, k, v, o, gate, up, down"))),
    }
}

fn name(p: Proj) -> &'static str {
    PROJECTIONS.iter().find(|(_, q)| *q == p).map(|(n, _)| *n).expect("every projection has a name")
}

#[wasm_bindgen]
impl Engine {
    /// A new MicroLoRA of this model with `options_json` (`{rank?, layers?, projections?, alpha?, learningRate?,
    /// ewcLambda?, fisherDecay?, seed?}`): its adapter id. It starts as the base model (`B = 0`).
    #[wasm_bindgen(js_name = createMicroLora)]
    pub fn create_micro_lora(&self, options_json: &str) -> Result<u32, JsValue> {
        let options = parse::<JsMicroLoraOptions>(options_json, "options")?.into_options().map_err(js_error)?;
        let lora = MicroLora::new(&self.model, options).map_err(js_error)?;
        self.keep(lora)
    }

    /// The longest state `saveMicroLora` gives for this model: a stored one longer than this is not one.
    #[wasm_bindgen(js_name = microLoraMaxBytes)]
    pub fn micro_lora_max_bytes(&self) -> usize {
        MicroLora::largest_state_bytes(&self.model)
    }

    /// A MicroLoRA from the bytes `saveMicroLora` gave (a damaged or another model's state is `E_ADAPTER`): its id.
    #[wasm_bindgen(js_name = openMicroLora)]
    pub fn open_micro_lora(&self, bytes: js_sys::Uint8Array) -> Result<u32, JsValue> {
        let bytes = bytes_from_js(&bytes, self.micro_lora_max_bytes(), "a saved MicroLoRA").map_err(js_error)?;
        let lora = MicroLora::from_bytes(&self.model, &bytes).map_err(js_error)?;
        self.keep(lora)
    }

    /// One training step of MicroLoRA `id` on `ids`, whose response starts at `first_target`, with `reward`
    /// (> 0 teaches it, < 0 pushes away from it): JSON `{loss, tokens, frozenMs, forwardMs, backwardMs, updateMs,
    /// steps}` (a Promise of it in the threaded build).
    #[wasm_bindgen(js_name = trainMicroLora)]
    pub fn train_micro_lora(
        &self,
        id: u32,
        ids: Vec<u32>,
        first_target: usize,
        reward: f32,
    ) -> Result<JsValue, JsValue> {
        let lora = self.trained(id)?;
        drop(idle(&lora).map_err(js_error)?); // refuse a second step now rather than wait in the pool
        let (model, session) = (self.model.clone(), self.session()?.clone());
        run_job(
            move || {
                let mut lora = lora.lock().unwrap_or_else(PoisonError::into_inner);
                // The frozen layers' output from the session, which generated the answer (or evaluates it now).
                let t0 = crate::clock::now_ms();
                let mut session = session.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(rows) = session.frozen_residuals(&ids, lora.first_layer())? {
                    lora.use_frozen(&model, &ids, rows)?;
                }
                drop(session);
                let from_session = crate::clock::now_ms() - t0;
                let mut r = lora.train_step(&model, &ids, first_target, reward)?;
                r.frozen_ms += from_session; // what the session evaluated of the example counts as the frozen layers' time
                Ok((r, lora.steps()))
            },
            |(r, steps)| {
                let report = serde_json::json!({
                    "loss": r.loss, "tokens": r.tokens, "frozenMs": r.frozen_ms, "forwardMs": r.forward_ms,
                    "backwardMs": r.backward_ms, "updateMs": r.update_ms, "steps": steps,
                });
                Ok(json(&report).into())
            },
        )
    }

    /// Make `examples_json` (`[[ids, firstTarget], ...]`: text the model should keep predicting) what MicroLoRA
    /// `id`'s EWC penalty protects (a Promise in the threaded build).
    #[wasm_bindgen(js_name = protectMicroLora)]
    pub fn protect_micro_lora(&self, id: u32, examples_json: &str) -> Result<JsValue, JsValue> {
        let examples: Vec<(Vec<u32>, usize)> = parse(examples_json, "examples")?;
        let lora = self.trained(id)?;
        drop(idle(&lora).map_err(js_error)?);
        let model = self.model.clone();
        run_job(
            move || lora.lock().unwrap_or_else(PoisonError::into_inner).protect(&model, &examples),
            |()| Ok(JsValue::UNDEFINED),
        )
    }

    /// Fold MicroLoRA `id`'s updates since the last consolidation into its consolidated weights: how many.
    #[wasm_bindgen(js_name = consolidateMicroLora)]
    pub fn consolidate_micro_lora(&self, id: u32) -> Result<u32, JsValue> {
        let lora = self.trained(id)?;
        let folded = idle(&lora).map_err(js_error)?.consolidate();
        Ok(folded)
    }

    /// Start MicroLoRA `id` again as a fresh one of its options (`B = 0`), its training state gone.
    #[wasm_bindgen(js_name = resetMicroLora)]
    pub fn reset_micro_lora(&self, id: u32) -> Result<(), JsValue> {
        let lora = self.trained(id)?;
        let mut lora = idle(&lora).map_err(js_error)?;
        lora.reset(&self.model).map_err(js_error)
    }

    /// MicroLoRA `id`'s whole training state, for `openMicroLora`.
    #[wasm_bindgen(js_name = saveMicroLora)]
    pub fn save_micro_lora(&self, id: u32) -> Result<Vec<u8>, JsValue> {
        let lora = self.trained(id)?;
        let bytes = idle(&lora).map_err(js_error)?.to_bytes(&self.model);
        Ok(bytes)
    }

    /// MicroLoRA `id`'s weights as llama.cpp's GGUF adapter file, named `name`.
    #[wasm_bindgen(js_name = exportMicroLora)]
    pub fn export_micro_lora(&self, id: u32, name: &str) -> Result<Vec<u8>, JsValue> {
        let lora = self.trained(id)?;
        let bytes = idle(&lora).map_err(js_error)?.to_gguf(&self.model, name);
        Ok(bytes)
    }

    /// MicroLoRA `id` as JSON: `{steps, params, stateBytes, rank, layers, projections, alpha, learningRate,
    /// ewcLambda, fisherDecay}`.
    #[wasm_bindgen(js_name = microLoraInfo)]
    pub fn micro_lora_info(&self, id: u32) -> Result<String, JsValue> {
        let lora = self.trained(id)?;
        let lora = idle(&lora).map_err(js_error)?;
        let o = lora.options();
        Ok(json(&serde_json::json!({
            "steps": lora.steps(), "params": lora.n_params(), "stateBytes": lora.state_bytes(), "rank": o.rank,
            "layers": o.layers, "projections": o.projections.iter().map(|&p| name(p)).collect::<Vec<_>>(), "alpha": o.alpha,
            "learningRate": o.learning_rate, "ewcLambda": o.ewc_lambda, "fisherDecay": o.fisher_decay,
        })))
    }
}

impl Engine {
    /// Keep MicroLoRA `lora` under a new id; the session keeps the residual stream below its layers from now on
    /// (for the MicroLoRA opened last), for its training steps.
    fn keep(&self, lora: MicroLora) -> Result<u32, JsValue> {
        self.session_now()?.keep_residuals(Some(lora.first_layer()));
        Ok(self.adapters.borrow_mut().train(lora))
    }

    fn trained(&self, id: u32) -> Result<std::sync::Arc<std::sync::Mutex<MicroLora>>, JsValue> {
        let adapters = self.adapters.borrow();
        adapters.trained.get(&id).cloned().ok_or_else(|| js_error(Error::Adapter(format!("no MicroLoRA has id {id}"))))
    }
}
