"""Controllable retrieval: study encoding, the gallery index, search with reranking."""

from .encoder import EncodedStudies, RerankerScorer, RetrievalEncoder, fuse_scores

__all__ = ["EncodedStudies", "RerankerScorer", "RetrievalEncoder", "fuse_scores"]
