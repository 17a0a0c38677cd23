"""hnswlib (PyPI) on the vectors benches/hnsw.rs wrote with --out DIR, against the same brute-force truth: build
time, recall@1 and recall@10 and queries per second on one thread at each ef, the numbers `hnsw` prints for ours.

    .venv/bin/python benches/hnsw_vs_hnswlib.py DIR [--metric cosine|dot|l2] [--m 16] [--ef-construction 200]
        [--ef 10,20,40,80,160,320]

Queries per second come from one knn_query call over all queries with num_threads=1 (hnswlib's loop in C++, no
Python per query); p50_us from a Python loop of single queries, so it includes a few microseconds of Python."""

import argparse
import importlib.metadata
import json
import sys
import time

import hnswlib
import numpy as np


def rows(path, dtype):
    raw = np.fromfile(path, dtype=np.uint8)
    n, width = np.frombuffer(raw[:8].tobytes(), dtype="<u4")
    return np.frombuffer(raw[8:].tobytes(), dtype=dtype).reshape(int(n), int(width))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--metric", default="cosine", choices=["cosine", "dot", "l2"])
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--ef-construction", type=int, default=200)
    p.add_argument("--ef", default="10,20,40,80,160,320")
    a = p.parse_args()
    vectors = rows(f"{a.dir}/vectors.f32", "<f4")
    queries = rows(f"{a.dir}/queries.f32", "<f4")
    truth = rows(f"{a.dir}/truth.u32", "<u4")
    n, dims = vectors.shape
    k = truth.shape[1]
    space = {"cosine": "cosine", "dot": "ip", "l2": "l2"}[a.metric]

    index = hnswlib.Index(space=space, dim=int(dims))
    index.init_index(max_elements=n, M=a.m, ef_construction=a.ef_construction, random_seed=100)
    index.set_num_threads(1)
    t = time.perf_counter()
    index.add_items(vectors, np.arange(n), num_threads=1)
    build_s = time.perf_counter() - t
    # hnswlib's own estimate of its memory: vectors, level-0 links and the label, plus the upper levels' links.
    size_l0 = dims * 4 + (2 * a.m + 1) * 4 + 8
    print(json.dumps({"engine": "hnswlib " + importlib.metadata.version("hnswlib"), "n": int(n), "dims": int(dims),
                      "metric": a.metric, "m": a.m, "ef_construction": a.ef_construction, "build_s": round(build_s, 2),
                      "inserts_per_s": round(n / build_s), "level0_bytes_per_vector": size_l0}))
    for ef in [int(e) for e in a.ef.split(",")]:
        index.set_ef(ef)
        t = time.perf_counter()
        labels, _ = index.knn_query(queries, k=k, num_threads=1)
        batch_s = time.perf_counter() - t
        times = []
        for q in queries:
            t = time.perf_counter()
            index.knn_query(q, k=k, num_threads=1)
            times.append((time.perf_counter() - t) * 1e6)
        times.sort()
        at1 = float(np.mean(labels[:, 0] == truth[:, 0]))
        at10 = float(np.mean([len(set(l) & set(t)) / k for l, t in zip(labels.tolist(), truth.tolist())]))
        print(json.dumps({"ef": ef, "recall_at_1": round(at1, 4), "recall_at_10": round(at10, 4),
                          "queries_per_s": round(len(queries) / batch_s), "p50_us": round(times[len(times) // 2], 1),
                          "p99_us": round(times[len(times) * 99 // 100], 1)}))


if __name__ == "__main__":
    sys.exit(main())
