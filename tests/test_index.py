"""The gallery index: round trip, exact vs fresh vs approximate search, atomic updates, search + plot."""

import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

import medreco
from medreco.factory import bundled_text_encoder_path
from medreco.processing import MedReCoImageProcessor
from medreco.retrieval import GalleryIndex, GalleryIndexError, RetrievalEncoder, Searcher, entity_key, plot_montage
from medreco.training.data import MinedData

sys.path.insert(0, str(Path(__file__).parent))
from toy_mined import RECIPES, write_toy_mined

ENTITY = "Pleural effusion"


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    data = MinedData(write_toy_mined(tmp_path_factory.mktemp("toy"), patients=40))
    ids = sorted(data.studies)
    return ids, [data.studies[s].image for s in ids]


def make_encoder(seed: int = 0) -> RetrievalEncoder:
    torch.manual_seed(seed)
    model = medreco.create_model("retrieval", "tiny")
    tokenizer = AutoTokenizer.from_pretrained(bundled_text_encoder_path())
    return RetrievalEncoder(model, tokenizer, MedReCoImageProcessor(recipes=RECIPES))


def test_index_round_trip_and_search_equals_a_fresh_build(archive, tmp_path):
    ids, images = archive
    encoder = make_encoder()
    index = GalleryIndex(tmp_path / "a", encoder)
    assert index.add(ids[:25], images[:25], ["chest_xray"] * 25, progress=False) == 25
    assert index.add(ids, images, ["chest_xray"] * len(ids), progress=False) == len(ids) - 25  # resumes
    fresh = GalleryIndex(tmp_path / "b", encoder)
    fresh.add(ids, images, ["chest_xray"] * len(ids), progress=False)
    reloaded = GalleryIndex(tmp_path / "a", encoder)
    assert reloaded.study_ids("chest_xray") == ids
    query = reloaded.entity_features("chest_xray", ENTITY)[0][3]
    for entity in (ENTITY, None):
        a = reloaded.search(query, "chest_xray", entity, top_k=8)
        b = fresh.search(query, "chest_xray", entity, top_k=8)
        assert [h.study_id for h in a] == [h.study_id for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-3)
    assert (tmp_path / "a" / "entities" / "chest_xray" / f"{entity_key(ENTITY)}.safetensors").exists()
    exact = reloaded.search(query, "chest_xray", ENTITY, top_k=10)
    approximate = reloaded.search(query, "chest_xray", ENTITY, top_k=10, approximate=True)
    overlap = len({h.study_id for h in exact} & {h.study_id for h in approximate}) / 10
    assert overlap >= 0.9
    assert ids[3] not in [h.study_id for h in reloaded.search(query, "chest_xray", ENTITY, 5, exclude={ids[3]})]


def test_adding_studies_invalidates_entity_caches_and_keeps_the_index_whole(archive, tmp_path):
    ids, images = archive
    index = GalleryIndex(tmp_path, make_encoder())
    index.add(ids[:30], images[:30], ["chest_xray"] * 30, progress=False)
    features, _ = index.entity_features("chest_xray", ENTITY)
    assert features.shape[0] == 30
    index.add(ids[30:], images[30:], ["chest_xray"] * (len(ids) - 30), progress=False)
    features, attention = index.entity_features("chest_xray", ENTITY)
    assert features.shape[0] == attention.shape[0] == len(ids)
    assert not list(tmp_path.rglob(".*.tmp"))
    with pytest.raises(GalleryIndexError, match="another retrieval model"):
        GalleryIndex(tmp_path, make_encoder(seed=1))
    with pytest.raises(GalleryIndexError, match="no chest_ct"):
        index.tokens("chest_ct")


def test_search_with_reranker_and_montage(archive, tmp_path):
    from medreco.retrieval import RerankerScorer

    ids, images = archive
    index = GalleryIndex(tmp_path / "index", make_encoder())
    index.add(ids, images, ["chest_xray"] * len(ids), progress=False)
    searcher = Searcher(index, RerankerScorer(medreco.create_model("reranker", "tiny")))
    hits, extras = searcher.search(images[0], "chest_xray", ENTITY, top_k=4, rerank_top=10, exclude={ids[0]})
    assert [h.rank for h in hits] == [1, 2, 3, 4] and ids[0] not in [h.study_id for h in hits]
    assert all(0.0 <= h.fused <= 1.0 and 0.0 <= h.reranker_probability <= 1.0 for h in hits)
    assert [h.fused for h in hits] == sorted((h.fused for h in hits), reverse=True)
    processor = index.encoder.image_processor
    path = plot_montage(
        processor.preprocess_one(images[0], "chest_xray"),
        extras["query_attention"],
        hits,
        [processor.preprocess_one(h.image, "chest_xray") for h in hits],
        extras["hit_attention"],
        patch_size=10,
        path=tmp_path / "montage.png",
    )
    assert path.stat().st_size > 5000
