//! The HNSW index natively, one thread: build time, recall@1 and recall@10 against brute force, and queries per
//! second at several `ef`, its size (in memory and as records) per vector, and the records a store rewrites after
//! 10 more inserts. The vectors are standard normal
//! (`--data random`) or around 100 centres (`--data clustered`, closer to embeddings), made from `--seed`, or rows
//! of a file (`--data FILE.f32`, as `--out` writes them: benches/minilm_corpus.py makes MiniLM embeddings of real
//! sentences), of which the last `--queries` rows are the queries and the `--n` before them the index.
//!
//! `--out DIR` writes the vectors, the queries and the brute-force neighbours there (`vectors.f32`,
//! `queries.f32`: u32 count, u32 dims, then f32 rows; `truth.u32`: u32 count, u32 k, then the rows' 0-based
//! indexes), so benches/hnsw_vs_hnswlib.py measures hnswlib on the same vectors against the same truth.
//!
//!   cargo bench -p ruvllm --bench hnsw -- [--n 10000] [--dims 384] [--queries 1000] [--metric cosine|dot|l2]
//!       [--data random|clustered] [--m 16] [--ef-construction 200] [--ef 10,20,40,80,160,320] [--out DIR]
//!       [--quantized on|off]
//!
//! `--quantized` (on: the index's default) walks the graph on the int8 copies of the vectors (`Hnsw::set_quantized`).

use std::path::PathBuf;
use std::time::Instant;

use ruvllm::index::{Hnsw, HnswParams, Metric};

const K: usize = 10;

struct Args {
    n: usize,
    dims: usize,
    queries: usize,
    metric: Metric,
    clustered: bool,
    file: Option<PathBuf>,
    params: HnswParams,
    efs: Vec<usize>,
    out: Option<PathBuf>,
    quantized: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        n: 10_000,
        dims: 384,
        queries: 1000,
        metric: Metric::Cosine,
        clustered: false,
        file: None,
        params: HnswParams::default(),
        efs: vec![10, 20, 40, 80, 160, 320],
        out: None,
        quantized: true,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--n" => args.n = number()?,
            "--dims" => args.dims = number()?,
            "--queries" => args.queries = number()?,
            "--m" => args.params.m = number()?,
            "--ef-construction" => args.params.ef_construction = number()?,
            "--seed" => args.params.seed = number()? as u64,
            "--metric" => {
                args.metric = match value.as_str() {
                    "cosine" => Metric::Cosine,
                    "dot" => Metric::Dot,
                    "l2" => Metric::L2,
                    _ => return Err(format!("--metric {value}: cosine, dot or l2")),
                }
            }
            "--data" => match value.as_str() {
                "clustered" => args.clustered = true,
                "random" => args.clustered = false,
                _ => args.file = Some(PathBuf::from(value)),
            },
            "--ef" => {
                args.efs = value
                    .split(',')
                    .map(|e| e.parse().map_err(|e| format!("--ef {value}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--out" => args.out = Some(PathBuf::from(value)),
            "--quantized" => {
                args.quantized = match value.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("--quantized {value}: on or off")),
                }
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// xorshift64* and Box-Muller: the same vectors on every machine for a seed.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f32 {
        ((-2.0 * self.uniform().ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()) as f32
    }
}

fn make_vectors(rng: &mut Rng, n: usize, dims: usize, centres: &[Vec<f32>]) -> Vec<Vec<f32>> {
    (0..n)
        .map(|i| match centres.len() {
            0 => (0..dims).map(|_| rng.normal()).collect(),
            c => centres[i % c].iter().map(|x| x + 0.6 * rng.normal()).collect(),
        })
        .collect()
}

type Rows = Vec<Vec<f32>>;

/// Rows of a file as `write_rows` writes them: the first `n` and the last `queries`.
fn read_rows(path: &PathBuf, n: usize, queries: usize) -> Result<(Rows, Rows), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let word = |i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes")) as usize;
    let (rows, dims) = (word(0), word(1));
    if bytes.len() != 8 + rows * dims * 4 || n + queries > rows {
        return Err(format!("{}: {rows} rows of {dims} for {n} vectors and {queries} queries", path.display()));
    }
    let row = |r: usize| {
        (0..dims).map(|d| f32::from_le_bytes(bytes[8 + 4 * (r * dims + d)..][..4].try_into().unwrap())).collect()
    };
    Ok(((0..n).map(row).collect(), (rows - queries..rows).map(row).collect()))
}

fn write_rows(path: PathBuf, rows: usize, width: usize, values: impl Iterator<Item = [u8; 4]>) -> Result<(), String> {
    let mut bytes = Vec::with_capacity(8 + rows * width * 4);
    bytes.extend_from_slice(&(rows as u32).to_le_bytes());
    bytes.extend_from_slice(&(width as u32).to_le_bytes());
    values.for_each(|v| bytes.extend_from_slice(&v));
    std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("hnsw bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = parse()?;
    let mut rng = Rng(args.params.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let centres = if args.clustered { make_vectors(&mut rng, 100, args.dims, &[]) } else { Vec::new() };
    let (vectors, queries) = match &args.file {
        Some(path) => read_rows(path, args.n, args.queries)?,
        None => (
            make_vectors(&mut rng, args.n, args.dims, &centres),
            make_vectors(&mut rng, args.queries, args.dims, &centres),
        ),
    };
    args.dims = vectors[0].len();
    let data = match &args.file {
        Some(path) => path.file_name().map_or("file".into(), |f| f.to_string_lossy().into_owned()),
        None if args.clustered => "clustered".into(),
        None => "random".into(),
    };

    let t = Instant::now();
    let mut index = Hnsw::new(args.metric, args.dims, args.params).map_err(|e| e.to_string())?;
    index.set_quantized(args.quantized);
    for (i, v) in vectors.iter().enumerate() {
        index.insert(i as u64, v).map_err(|e| e.to_string())?;
    }
    let build_s = t.elapsed().as_secs_f64();
    let blob = index.to_bytes();
    let t = Instant::now();
    let back = Hnsw::from_bytes(&blob).map_err(|e| e.to_string())?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(back.len(), index.len());
    println!(
        "{{\"n\":{},\"dims\":{},\"metric\":\"{:?}\",\"data\":\"{}\",\"m\":{},\"ef_construction\":{},\"quantized\":{},\"build_s\":{build_s:.2},\
         \"inserts_per_s\":{:.0},\"memory_bytes_per_vector\":{:.0},\"blob_bytes_per_vector\":{:.0},\"load_ms\":{load_ms:.1}}}",
        args.n,
        args.dims,
        args.metric,
        data,
        args.params.m,
        args.params.ef_construction,
        args.quantized,
        args.n as f64 / build_s,
        index.memory_bytes() as f64 / args.n as f64,
        blob.len() as f64 / args.n as f64,
    );

    let truth: Vec<Vec<u64>> = queries
        .iter()
        .map(|q| index.search_exact(q, K, None).map(|hits| hits.iter().map(|h| h.id).collect()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let floats = |rows: &[Vec<f32>]| rows.iter().flatten().map(|x| x.to_le_bytes()).collect::<Vec<_>>();
        write_rows(dir.join("vectors.f32"), args.n, args.dims, floats(&vectors).into_iter())?;
        write_rows(dir.join("queries.f32"), args.queries, args.dims, floats(&queries).into_iter())?;
        write_rows(dir.join("truth.u32"), args.queries, K, truth.iter().flatten().map(|&i| (i as u32).to_le_bytes()))?;
    }

    for &ef in &args.efs {
        let mut times = Vec::with_capacity(queries.len());
        let (mut at1, mut at10) = (0usize, 0usize);
        for (q, truth) in queries.iter().zip(&truth) {
            let t = Instant::now();
            let found = index.search(q, K, ef).map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
            at1 += usize::from(found.first().map(|h| h.id) == Some(truth[0]));
            at10 += truth.iter().filter(|id| found.iter().any(|h| h.id == **id)).count();
        }
        let mean_us = times.iter().sum::<f64>() / times.len() as f64;
        times.sort_by(f64::total_cmp);
        println!(
            "{{\"ef\":{ef},\"recall_at_1\":{:.4},\"recall_at_10\":{:.4},\"queries_per_s\":{:.0},\"p50_us\":{:.1},\"p99_us\":{:.1}}}",
            at1 as f64 / queries.len() as f64,
            at10 as f64 / (K * queries.len()) as f64,
            1e6 / mean_us,
            times[times.len() / 2],
            times[times.len() * 99 / 100],
        );
    }

    // What a store writes after a few more inserts, once it holds the index: the records they changed.
    let size = |c: &ruvllm::index::Commit| c.segments.iter().map(|(_, b)| b.len()).sum::<usize>() + c.header.len();
    let whole = size(&index.commit());
    let more = 10.min(queries.len());
    for (i, q) in queries[..more].iter().enumerate() {
        index.insert((args.n + i) as u64, q).map_err(|e| e.to_string())?;
    }
    let changed = index.commit();
    println!(
        "{{\"inserts\":{more},\"records_written\":{},\"bytes_written\":{},\"all_records_bytes\":{whole}}}",
        changed.segments.len() + 1,
        size(&changed)
    );
    Ok(())
}
