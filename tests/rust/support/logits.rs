//! Logits helpers and the measure every backend's numerics are held to: teacher-forced next-token distributions against
//! llama.cpp's (`logits.json` in the reference folder). See the issue on the core engine for the thresholds.

use super::{read_json, reference_dir};

/// Softmax probability of `id` under `logits` (temperature 1, computed in f64).
pub fn prob(logits: &[f32], id: u32) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    (logits[id as usize] as f64 - max).exp() / sum
}

/// The most likely id, lowest on ties.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Score every reference sequence with `eval` (ids -> logits of every position, row-major) and assert:
/// our top-1 equals llama.cpp's wherever llama.cpp's leads its second by >= 0.2, and at >= 98% of positions
/// where it leads by >= 0.05; |p1 - p1_llama.cpp| has median <= 0.015 and max <= 0.15.
pub fn assert_matches_llama_cpp(vocab: usize, mut eval: impl FnMut(&[u32]) -> Vec<f32>) {
    let reference = read_json(&format!("{}/logits.json", reference_dir()));
    let (mut n_clear, mut n_close, mut n_close_agree) = (0, 0, 0);
    let mut dp1 = Vec::new();
    for prompt in reference["prompts"].as_array().unwrap() {
        let mut ids: Vec<u32> = serde_json::from_value(prompt["prompt_ids"].clone()).unwrap();
        let cont: Vec<u32> = serde_json::from_value(prompt["continuation"]["ids"].clone()).unwrap();
        ids.extend(cont);
        let positions = prompt["positions"].as_array().unwrap();
        assert_eq!(positions.len(), ids.len(), "one distribution per input token");
        let logits = eval(&ids);
        for (i, pos) in positions.iter().enumerate() {
            let row = &logits[i * vocab..(i + 1) * vocab];
            let top: Vec<(u32, f64)> = pos["top"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (t["id"].as_u64().unwrap() as u32, t["prob"].as_f64().unwrap()))
                .collect();
            let (ref_top1, ref_p1) = top[0];
            let gap = ref_p1 - top[1].1;
            let ours = argmax(row);
            dp1.push((prob(row, ref_top1) - ref_p1).abs());
            if gap >= 0.2 {
                n_clear += 1;
                assert_eq!(ours, ref_top1, "{}: position {i}: llama.cpp's top-1 leads by {gap:.3}", prompt["prompt"]);
            }
            if gap >= 0.05 {
                n_close += 1;
                n_close_agree += (ours == ref_top1) as usize;
            }
        }
    }
    dp1.sort_by(f64::total_cmp);
    let median = dp1[dp1.len() / 2];
    let max = dp1[dp1.len() - 1];
    let agree = n_close_agree as f64 / n_close as f64;
    println!(
        "{} positions; top-1 agreement {agree:.4} where gap>=0.05 ({n_close}), {n_clear} clear; |dp1| median {median:.4} max {max:.4}",
        dp1.len()
    );
    assert!(n_clear > 100, "the reference has enough clear positions to test");
    assert!(agree >= 0.98, "top-1 agrees at {agree:.4} of positions where llama.cpp leads by >= 0.05");
    assert!(median <= 0.015, "median |dp1| {median:.4} > 0.015");
    assert!(max <= 0.15, "max |dp1| {max:.4} > 0.15");
}
