"""Controllable retrieval: study encoding, the gallery index, search with reranking."""

from .encoder import EncodedStudies, RerankerScorer, RetrievalEncoder, fuse_scores
from .index import ExactSearch, GalleryIndex, GalleryIndexError, SearchHit, entity_key
from .search import RankedStudy, Searcher, attention_map, plot_montage

__all__ = [
    "ExactSearch",
    "EncodedStudies",
    "GalleryIndex",
    "GalleryIndexError",
    "RankedStudy",
    "RerankerScorer",
    "RetrievalEncoder",
    "SearchHit",
    "Searcher",
    "attention_map",
    "entity_key",
    "fuse_scores",
    "plot_montage",
]
