"""Inference with trained models: study encoding, the gallery index, search with reranking (controllable
retrieval), and the comparative reader (answers about two studies)."""

from .comparison import ComparativeReader
from .device import DeviceError, InferenceDevice
from .encoder import EncodedStudies, RerankerScorer, RetrievalEncoder, fuse_scores
from .index import ExactSearch, GalleryIndex, GalleryIndexError, SearchHit, entity_key, index_archive
from .search import RankedStudy, Searcher, attention_map, plot_montage

__all__ = [
    "ComparativeReader",
    "DeviceError",
    "ExactSearch",
    "EncodedStudies",
    "GalleryIndex",
    "GalleryIndexError",
    "InferenceDevice",
    "RankedStudy",
    "RerankerScorer",
    "RetrievalEncoder",
    "SearchHit",
    "Searcher",
    "attention_map",
    "entity_key",
    "fuse_scores",
    "index_archive",
    "plot_montage",
]
