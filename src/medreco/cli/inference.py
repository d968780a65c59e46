"""Inference with trained models: `index` an archive, `search` it, `compare` two studies."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .command import Command, device_arguments, inference_device, modality, positive_int


def _index_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, help="stage-1 output folder or Hub repository (model, tokenizer, image processor)"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--mined", help="mined folder: index its studies")
    source.add_argument("--manifest", help="CSV/JSONL with image, modality (and study_id)")
    parser.add_argument("--split", help="with --mined: only this split")
    parser.add_argument("--entity", action="append", help="precompute this entity's embeddings (repeatable)")
    parser.add_argument("--out", required=True, help="index folder")
    parser.add_argument(
        "--commit-every", type=int, default=64, help="studies encoded between commits (a kill loses at most these)"
    )
    device_arguments(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _index(args: argparse.Namespace) -> int:
    """Encode an archive (mined studies or a manifest) into a gallery index; resumes if interrupted."""
    from ..data.mining import MinedData, read_study_manifest
    from ..inference import index_archive

    placement = inference_device(args)
    if args.mined:
        studies = [vars(s) for s in MinedData(args.mined).studies.values() if args.split in (None, s.split)]
    else:
        studies = read_study_manifest(args.manifest, required=("image", "modality"))
    result = index_archive(
        args.model, args.out, studies, args.entity or (), not args.quiet, args.commit_every, placement
    )
    print(json.dumps(result))
    if result["unreadable"]:
        print(
            f"medreco index: {len(result['unreadable'])} unreadable image(s) skipped (listed in "
            f"{Path(args.out) / 'index.json'}; fixed ones are indexed on the next run)",
            file=sys.stderr,
        )
    return 0


def _search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", help="query image: DICOM file/folder, NIfTI, PNG/JPEG")
    parser.add_argument("--index", required=True, help="index folder (medreco index)")
    parser.add_argument("--model", required=True, help="the stage-1 model the index was built with (folder or Hub id)")
    parser.add_argument(
        "--modality",
        required=True,
        type=modality,
        help="the query's modality: chest_ct, chest_xray, ... (or cxr, MR, US)",
    )
    parser.add_argument("--entity", help="clinical entity text; omit for whole-image retrieval")
    parser.add_argument("--reranker", help="reranker folder (rerank the top candidates)")
    parser.add_argument("--top-k", type=positive_int, default=5, help="hits to show")
    parser.add_argument("--rerank-top", type=positive_int, default=20, help="candidates the reranker rescores")
    parser.add_argument(
        "--fusion-weight", type=float, default=0.5, help="weight of the reranker probability in the fused score"
    )
    parser.add_argument("--approximate", action="store_true", help="FAISS HNSW instead of exact search")
    parser.add_argument("--exclude", action="append", help="study ids to leave out (repeatable)")
    parser.add_argument(
        "--include-query",
        action="store_true",
        help="keep the query's own study when the query is an indexed image (left out by default)",
    )
    parser.add_argument("--plot", help="write a montage with attention heat-maps to this PNG")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    device_arguments(parser)


def _search(args: argparse.Namespace) -> int:
    """Rank an index for a query study under an entity (or whole-image), optionally reranked."""
    from ..inference import GalleryIndex, GalleryIndexError, RerankerScorer, RetrievalEncoder, Searcher

    placement = inference_device(args)
    if not (Path(args.index) / "index.json").is_file():  # before the model is read
        raise GalleryIndexError(f"{args.index}: not an index (no index.json); build one with medreco index")
    encoder = RetrievalEncoder.from_pretrained(args.model, placement)
    reranker = RerankerScorer.from_pretrained(args.reranker, placement) if args.reranker else None
    index = GalleryIndex(args.index, encoder)
    index.require_modality(args.modality)
    exclude = set(args.exclude or [])
    if not args.include_query and (itself := set(index.studies_of_image(args.query)) - exclude):
        print(
            f"medreco search: left out {', '.join(sorted(itself))}, the query itself (--include-query keeps it)",
            file=sys.stderr,
        )
        exclude |= itself
    searcher = Searcher(index, reranker, args.fusion_weight)
    search = (args.query, args.modality, args.entity, args.top_k, args.rerank_top, args.approximate)
    hits, extras = searcher.search(*search, exclude=exclude)
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], indent=2))
    else:
        reranked = args.reranker is not None  # without a reranker, the fused score is the cosine's
        print(f"{'rank':>4}  {'study':<20} {'cosine':>7}" + (f" {'reranker':>8} {'fused':>6}" if reranked else ""))
        for h in hits:
            row = f"{h.rank:>4}  {h.study_id:<20} {h.cosine:>7.3f}"
            probability = "-" if h.reranker_probability is None else f"{h.reranker_probability:.3f}"
            print(row + (f" {probability:>8} {h.fused:>6.3f}" if reranked else ""))
    if args.plot:
        searcher.plot(args.query, args.modality, hits, extras, args.plot, title=args.entity or "whole image")
        print(f"montage written to {args.plot}")
    return 0


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("first", help="prior (or query) study")
    parser.add_argument("second", help="current (or reference) study")
    parser.add_argument("--model", required=True, help="stage-2 output folder or Hub repository")
    parser.add_argument("--question", required=True, help="the question about the two studies")
    parser.add_argument("--modality", type=modality, default="chest_xray", help="the studies' modality (or an alias)")
    parser.add_argument("--labels", nargs=2, default=["Case A", "Case B"], help="names of the two images")
    parser.add_argument(
        "--entity",
        help="the finding the question is about, for a VLM with entity tokens (default: the one the question names)",
    )
    device_arguments(parser, device_map=True)


def _compare(args: argparse.Namespace) -> int:
    """The comparative VLM's answer to a question about two studies."""
    from ..inference import ComparativeReader

    reader = ComparativeReader.from_pretrained(args.model, inference_device(args))
    answer = reader.answer(
        args.first, args.second, args.question, args.modality, tuple(args.labels), entity=args.entity
    )
    if not answer:
        print(f"medreco compare: the model at {args.model} generated no text (is it trained?)", file=sys.stderr)
        return 1
    print(answer)
    return 0


COMMANDS = (
    Command("index", "encode an archive into a gallery index (resumable)", _index_arguments, _index),
    Command("search", "rank an index for a query study under an entity", _search_arguments, _search),
    Command("compare", "the comparative VLM's answer about two studies", _compare_arguments, _compare),
)
