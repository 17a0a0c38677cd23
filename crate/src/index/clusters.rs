//! A label's entries grouped by their vectors, for the deep learning loop's pattern bank: k-means with k-means++
//! seeding (Arthur and Vassilvitskii), and the pairs of entries so alike that one of them is redundant.
//!
//! Both work on the vectors as the index stores them (normalized under cosine) with the squared Euclidean distance,
//! which k-means minimizes; under cosine the centroids are normalized again after each update (spherical k-means),
//! so a cluster's centroid is a direction like its members. The seeding draws from a generator seeded by the caller:
//! the same entries and seed give the same clusters everywhere.

use super::{Collection, Metric};
use crate::error::{Error, Result};
use crate::simd::l2_squared;
use crate::splitmix::SplitMix64;

/// Lloyd's iterations at most; they stop earlier once no entry changes cluster.
const MAX_ITERATIONS: usize = 50;

/// One cluster: its centroid, its members (entry ids, ascending) and the member nearest the centroid.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Cluster {
    pub centroid: Vec<f32>,
    pub members: Vec<u64>,
    pub medoid: u64,
}

/// Two entries and their similarity (the collection's score: `1 - distance` under cosine and dot).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct NearPair {
    pub a: u64,
    pub b: u64,
    pub score: f32,
}

impl Collection {
    /// `label`'s entries (every entry's without one) in at most `k` clusters (fewer when there are fewer entries,
    /// none empty), largest first.
    pub fn clusters(&self, label: Option<&str>, k: usize, seed: u64) -> Result<Vec<Cluster>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        let points: Vec<(u64, &[f32])> = self
            .entries()
            .filter(|(_, e)| label.is_none_or(|l| e.label == l))
            .filter_map(|(id, _)| Some((id, self.index().vector(id)?)))
            .collect();
        Ok(kmeans(&points, k, self.index().metric() == Metric::Cosine, seed))
    }

    /// Pairs of `label`'s entries that score at least `min_score` against each other, each pair once (`a < b`),
    /// found among each entry's `neighbours` nearest by the graph.
    pub fn near_pairs(&self, label: &str, min_score: f32, neighbours: usize) -> Result<Vec<NearPair>> {
        if !min_score.is_finite() {
            return Err(Error::InvalidArgument(format!("min_score {min_score} must be finite")));
        }
        let same = |e: &super::Entry| e.label == label;
        let mut pairs = Vec::new();
        for (a, entry) in self.entries() {
            let Some(v) = (entry.label == label).then(|| self.index().vector(a)).flatten() else { continue };
            let found = self.search(v, neighbours + 1, (neighbours + 1).max(32), Some(&same))?;
            pairs.extend(found.into_iter().filter(|f| f.id > a && f.score >= min_score).map(|f| NearPair {
                a,
                b: f.id,
                score: f.score,
            }));
        }
        Ok(pairs)
    }
}

/// k-means++ then Lloyd's iterations over `points` (ids and vectors of one length); `spherical`: centroids kept at
/// length 1.
pub fn kmeans(points: &[(u64, &[f32])], k: usize, spherical: bool, seed: u64) -> Vec<Cluster> {
    let n = points.len();
    if n == 0 || k == 0 {
        return Vec::new();
    }
    let mut rng = SplitMix64(seed);
    // Seeding: the first centre at random, each next one drawn with probability proportional to its squared
    // distance from the nearest centre chosen (a point already chosen has distance 0 and is not drawn again).
    let mut centroids: Vec<Vec<f32>> = vec![points[(rng.f64() * n as f64) as usize % n].1.to_vec()];
    let mut nearest: Vec<f32> = points.iter().map(|(_, v)| l2_squared(v, &centroids[0])).collect();
    while centroids.len() < k.min(n) {
        let total: f64 = nearest.iter().map(|&d| d as f64).sum();
        if total <= 0.0 {
            break; // every point sits on a centre: no more distinct centres
        }
        let mut target = rng.f64() * total;
        let mut pick = n - 1;
        for (i, &d) in nearest.iter().enumerate() {
            target -= d as f64;
            if target < 0.0 && d > 0.0 {
                pick = i;
                break;
            }
        }
        let centre = points[pick].1.to_vec();
        for (d, (_, v)) in nearest.iter_mut().zip(points) {
            *d = d.min(l2_squared(v, &centre));
        }
        centroids.push(centre);
    }
    let mut assignment = vec![usize::MAX; n];
    for _ in 0..MAX_ITERATIONS {
        let mut moved = false;
        for (i, (_, v)) in points.iter().enumerate() {
            let best = closest(&centroids, v);
            moved |= assignment[i] != best;
            assignment[i] = best;
        }
        if !moved {
            break;
        }
        for (c, centroid) in centroids.iter_mut().enumerate() {
            let members: Vec<&[f32]> =
                points.iter().zip(&assignment).filter(|(_, &a)| a == c).map(|(p, _)| p.1).collect();
            if members.is_empty() {
                continue; // kept where it was; dropped at the end if it stays empty
            }
            centroid.iter_mut().for_each(|x| *x = 0.0);
            for m in &members {
                centroid.iter_mut().zip(*m).for_each(|(x, y)| *x += y);
            }
            let scale = 1.0 / members.len() as f32;
            centroid.iter_mut().for_each(|x| *x *= scale);
            if spherical {
                super::distance::normalize(centroid);
            }
        }
    }
    let mut clusters: Vec<Cluster> = centroids
        .into_iter()
        .enumerate()
        .filter_map(|(c, centroid)| {
            let members: Vec<usize> = (0..n).filter(|&i| assignment[i] == c).collect();
            let medoid = *members
                .iter()
                .min_by(|&&a, &&b| l2_squared(points[a].1, &centroid).total_cmp(&l2_squared(points[b].1, &centroid)))?;
            let mut ids: Vec<u64> = members.iter().map(|&i| points[i].0).collect();
            ids.sort_unstable();
            Some(Cluster { centroid, members: ids, medoid: points[medoid].0 })
        })
        .collect();
    clusters.sort_by(|a, b| b.members.len().cmp(&a.members.len()).then(a.medoid.cmp(&b.medoid)));
    clusters
}

fn closest(centroids: &[Vec<f32>], v: &[f32]) -> usize {
    let mut best = (0, f32::INFINITY);
    for (c, centroid) in centroids.iter().enumerate() {
        let d = l2_squared(v, centroid);
        if d < best.1 {
            best = (c, d);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::HnswParams;
    use crate::test_support::{test, Rng};

    /// Points around `centres`, `per` each, with noise of `spread`.
    fn blobs<const D: usize>(centres: &[[f32; D]], per: usize, spread: f32, rng: &mut Rng) -> Vec<(u64, Vec<f32>)> {
        let mut out = Vec::new();
        for (c, centre) in centres.iter().enumerate() {
            for i in 0..per {
                let v = centre.iter().map(|x| x + rng.uniform(-spread, spread)).collect();
                out.push(((c * per + i) as u64, v));
            }
        }
        out
    }

    #[test]
    fn kmeans_finds_separated_blobs() {
        let mut rng = Rng::new(7);
        let data = blobs(&[[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]], 20, 1.0, &mut rng);
        let points: Vec<(u64, &[f32])> = data.iter().map(|(id, v)| (*id, v.as_slice())).collect();
        for seed in 0..5 {
            let clusters = kmeans(&points, 3, false, seed);
            assert_eq!(clusters.len(), 3);
            let mut groups: Vec<Vec<u64>> = clusters.iter().map(|c| c.members.clone()).collect();
            groups.sort();
            assert_eq!(
                groups,
                vec![(0..20).collect::<Vec<_>>(), (20..40).collect(), (40..60).collect()],
                "seed {seed}"
            );
            for c in &clusters {
                assert!(c.members.contains(&c.medoid));
            }
        }
        // More clusters than distinct points: no empty cluster, no repeated centre.
        let same: Vec<(u64, &[f32])> = (0..5).map(|i| (i, [1.0f32, 1.0].as_slice())).collect();
        let one = kmeans(&same, 3, false, 1);
        assert_eq!((one.len(), one[0].members.len()), (1, 5));
        assert!(kmeans(&[], 3, false, 1).is_empty());
    }

    #[test]
    fn a_collection_clusters_a_label_and_finds_near_pairs() {
        let mut c = Collection::new(Metric::Cosine, 8, HnswParams::default()).unwrap();
        let mut rng = Rng::new(3);
        let axis = |i: usize| std::array::from_fn::<f32, 8, _>(|j| if i == j { 1.0 } else { 0.0 });
        for (id, v) in blobs(&[axis(0), axis(1)], 10, 0.05, &mut rng) {
            c.add(&v, &format!("t{id}"), "good", id).unwrap();
        }
        c.add(&[-1.0; 8], "other", "bad", 99).unwrap();
        let clusters = c.clusters(Some("good"), 4, 2).unwrap();
        let members: usize = clusters.iter().map(|c| c.members.len()).sum();
        assert_eq!(members, 20);
        for k in &clusters {
            assert!((k.centroid.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-4, "normalized centroid");
        }
        assert!(matches!(c.clusters(None, 0, 1), Err(Error::InvalidArgument(_))));
        // Two copies of one direction are a near pair; the rest are not near enough.
        let twin = c.add(&[0.3, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "twin", "good", 100).unwrap().0;
        let twin2 = c.add(&[0.6, 0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "twin", "good", 101).unwrap().0;
        let pairs = c.near_pairs("good", 0.999_999, 4).unwrap();
        assert_eq!(pairs.iter().map(|p| (p.a, p.b)).collect::<Vec<_>>(), vec![(twin, twin2)]);
        assert!(c.near_pairs("bad", 0.5, 4).unwrap().is_empty());
    }
}
