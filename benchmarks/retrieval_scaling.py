"""Query latency and memory of gallery search at 10k / 100k / 1M entity-conditioned embeddings.

Systems, all in this process on the same unit vectors (d = 512, the paper's width), clustered by
default as entity-conditioned embeddings are (studies with the same finding status lie close):
`--clusters 0` gives uniform random vectors instead, on which every point is nearly equidistant
from every other, so an approximate index's recall@10 measures noise rather than search quality.
- numpy brute force (the baseline): `gallery @ query` then argpartition;
- torch float32: `gallery @ query` then topk, every float32 byte read per query;
- exact (what `GalleryIndex.search` does, `ExactSearch`): scores over a float16 copy, then the
  rows their error bound cannot rule out rescored in float32; its top 10 is checked against the
  numpy brute force on every query (`agrees`: share of queries with the same top 10);
- approximate: FAISS HNSW with `GalleryIndex`'s settings (M 32, efConstruction 100, efSearch 128),
  with its recall@10 against exact search;
and the time to add a new entity over 100k cached studies (conditioning the stored tokens of the
tiny model: the same code as the paper-size model, cost scales with its width).

    python benchmarks/retrieval_scaling.py --sizes 10000,100000,1000000
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from medreco.inference.index import HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH, HNSW_NEIGHBOURS, ExactSearch


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(samples, q) * 1000)


def time_queries(search, queries: np.ndarray) -> list[float]:
    times = []
    for query in queries:
        start = time.perf_counter()
        search(query)
        times.append(time.perf_counter() - start)
    return times


def unit_gallery(size: int, dim: int, clusters: int, rng: np.random.Generator) -> np.ndarray:
    """`size` unit vectors: around `clusters` random centres (cosine to the centre ~0.8), or uniform."""
    if clusters:
        centres = rng.standard_normal((clusters, dim), dtype=np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        gallery = centres[rng.integers(0, clusters, size)]
        gallery += 0.75 / np.sqrt(dim) * rng.standard_normal((size, dim), dtype=np.float32)
    else:
        gallery = rng.standard_normal((size, dim), dtype=np.float32)
    return gallery / np.linalg.norm(gallery, axis=1, keepdims=True)


def bench_size(size: int, dim: int, n_queries: int, clusters: int, rng: np.random.Generator) -> None:
    import faiss

    vectors = unit_gallery(size + n_queries, dim, clusters, rng)  # queries: new studies, same distribution
    gallery, queries = vectors[:size], vectors[size:]
    tensor = torch.from_numpy(gallery)

    def numpy_search(q):
        scores = gallery @ q
        top = np.argpartition(-scores, 10)[:10]
        return top[np.argsort(-scores[top])]

    def dense_search(q):
        return torch.topk(tensor @ torch.from_numpy(q), 10).indices.numpy()

    searcher = ExactSearch(tensor)

    def exact_search(q):
        return searcher.search(torch.from_numpy(q), 10)[1].numpy()

    baseline = time_queries(numpy_search, queries)
    dense = time_queries(dense_search, queries)
    exact = time_queries(exact_search, queries)
    agrees = np.mean([np.array_equal(exact_search(q), numpy_search(q)) for q in queries])
    start = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(dim, HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    hnsw.hnsw.efSearch = HNSW_EF_SEARCH
    hnsw.add(gallery)
    build = time.perf_counter() - start
    approximate = time_queries(lambda q: hnsw.search(q[None], 10), queries)
    recall = np.mean([len(set(exact_search(q)) & set(hnsw.search(q[None], 10)[1][0])) / 10 for q in queries])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{size:>9,} | numpy p50 {percentile_ms(baseline, 50):7.2f} ms p95 {percentile_ms(baseline, 95):7.2f} | "
        f"torch float32 p50 {percentile_ms(dense, 50):7.2f} ms | "
        f"exact p50 {percentile_ms(exact, 50):7.2f} ms p95 {percentile_ms(exact, 95):7.2f} "
        f"({np.median(baseline) / np.median(exact):.1f}x numpy, agrees {agrees:.3f}) | "
        f"HNSW p50 {percentile_ms(approximate, 50):6.3f} ms p95 {percentile_ms(approximate, 95):6.3f} "
        f"({np.median(baseline) / np.median(approximate):.0f}x numpy), recall@10 {recall:.3f}, build {build:.0f} s | "
        f"gallery {gallery.nbytes / 2**20:.0f} MB (+{searcher.coarse.nbytes / 2**20:.0f} MB float16), "
        f"peak RSS {rss:.0f} MB"
    )


def bench_new_entity(studies: int) -> None:
    """Condition `studies` stored token sets on a new entity with the tiny model (no image re-read)."""
    from transformers import AutoTokenizer

    import medreco
    from medreco.factory import bundled_text_encoder_path
    from medreco.inference import RetrievalEncoder
    from medreco.processing import MedReCoImageProcessor

    model = medreco.create_model("retrieval", "tiny")
    encoder = RetrievalEncoder(
        model, AutoTokenizer.from_pretrained(bundled_text_encoder_path()), MedReCoImageProcessor()
    )
    tokens = torch.randn(studies, 16, model.config.vision_config.hidden_size)
    ids = torch.zeros(studies, dtype=torch.long)
    start = time.perf_counter()
    encoder.condition(tokens, ids, "Pleural effusion", batch_size=4096)
    print(
        f"new entity over {studies:,} cached studies (tiny model, 16 tokens each): {time.perf_counter() - start:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--entity-studies", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=1000, help="0: uniform random vectors")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    rng = np.random.default_rng(0)
    for size in (int(s) for s in args.sizes.split(",")):
        bench_size(size, args.dim, args.queries, args.clusters, rng)
    bench_new_entity(args.entity_studies)


if __name__ == "__main__":
    main()
