"""Inference with trained models: study encoding, the gallery index, search with reranking (controllable
retrieval), and the comparative reader (answers about two studies)."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .comparison import ComparativeReader
    from .device import DeviceError, InferenceDevice
    from .encoder import EncodedStudies, RerankerScorer, RetrievalEncoder, fuse_scores
    from .index import ExactSearch, GalleryIndex, GalleryIndexError, SearchHit, entity_key, index_archive
    from .progression import ProgressionPredictor, TrendPredictor, ZeroShotProgressionPredictor, progression_batch
    from .search import RankedStudy, Searcher, attention_map, plot_montage

__getattr__, __dir__ = lazy_exports(__name__, __file__)

__all__ = [
    "ComparativeReader",
    "DeviceError",
    "ExactSearch",
    "EncodedStudies",
    "GalleryIndex",
    "GalleryIndexError",
    "InferenceDevice",
    "ProgressionPredictor",
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
    "progression_batch",
    "TrendPredictor",
    "ZeroShotProgressionPredictor",
]
