"""The gallery index: round trip, exact vs fresh vs approximate search, atomic updates, search + plot."""

import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

import medreco
from medreco.data.mining import MinedData
from medreco.factory import bundled_text_encoder_path
from medreco.inference import (
    ExactSearch,
    GalleryIndex,
    GalleryIndexError,
    RetrievalEncoder,
    Searcher,
    entity_key,
    plot_montage,
)
from medreco.processing import MedReCoImageProcessor

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
    cache = reloaded._entity_path("chest_xray", ENTITY)
    assert cache.exists() and cache.name == f"{entity_key(ENTITY)}.safetensors"
    exact = reloaded.search(query, "chest_xray", ENTITY, top_k=10)
    approximate = reloaded.search(query, "chest_xray", ENTITY, top_k=10, approximate=True)
    overlap = len({h.study_id for h in exact} & {h.study_id for h in approximate}) / 10
    assert overlap >= 0.9
    assert ids[3] not in [h.study_id for h in reloaded.search(query, "chest_xray", ENTITY, 5, exclude={ids[3]})]
    with pytest.raises(ValueError, match="NaN"):
        reloaded.search(torch.full_like(query, float("nan")), "chest_xray", ENTITY)
    # a few studies' stored rows, read row by row, equal the whole tables' rows
    hits = reloaded.search(query, "chest_xray", ENTITY, top_k=4)
    assert [ids[h.row] for h in hits] == [h.study_id for h in hits]
    rows = [h.row for h in hits]
    stored = reloaded.rows("chest_xray", ENTITY, rows)
    features, attention = reloaded.entity_features("chest_xray", ENTITY)
    assert torch.equal(stored["tokens"], reloaded.tokens("chest_xray")[rows])
    assert torch.equal(stored["features"], features[rows]) and torch.equal(stored["attention"], attention[rows])


def test_adding_studies_invalidates_entity_caches_and_keeps_the_index_whole(archive, tmp_path):
    ids, images = archive
    index = GalleryIndex(tmp_path, make_encoder())
    index.add(ids[:30], images[:30], ["chest_xray"] * 30, progress=False)
    features, _ = index.entity_features("chest_xray", ENTITY)
    assert features.shape[0] == 30
    assert len(index.search(features[0], "chest_xray", ENTITY, top_k=100)) == 30
    index.add(ids[30:], images[30:], ["chest_xray"] * (len(ids) - 30), progress=False)
    features, attention = index.entity_features("chest_xray", ENTITY)
    assert features.shape[0] == attention.shape[0] == len(ids)
    # the in-memory gallery of the search before the update is not reused: new studies are found
    hits = index.search(features[-1], "chest_xray", ENTITY, top_k=len(ids))
    assert {h.study_id for h in hits} == set(ids)
    assert hits[0].study_id == ids[-1] and hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert not list(tmp_path.rglob(".*.tmp"))
    # a damaged entity cache (NaN features) is refused with its file named, not searched
    from safetensors.torch import save_file

    damaged = index._entity_path("chest_xray", ENTITY)
    save_file({"features": torch.full_like(features, float("nan")), "attention": attention.half()}, damaged)
    with pytest.raises(GalleryIndexError, match=damaged.name):
        index.search(features[0], "chest_xray", ENTITY)
    with pytest.raises(GalleryIndexError, match="another retrieval model"):
        GalleryIndex(tmp_path, make_encoder(seed=1))
    with pytest.raises(GalleryIndexError, match="no chest_ct"):
        index.tokens("chest_ct")


def _float64_top_k(gallery: torch.Tensor, query: torch.Tensor, k: int) -> torch.Tensor:
    return torch.topk(gallery.double() @ query.double(), k).indices


@pytest.mark.parametrize("layout", ["uniform", "clustered", "near_ties", "unnormalised"])
def test_exact_search_equals_a_float64_brute_force(layout):
    generator = torch.Generator().manual_seed(0)
    gallery = torch.randn(20000, 64, generator=generator)
    if layout == "clustered":  # most rows close to one of a few centres, like conditioned features
        centres = torch.randn(20, 64, generator=generator)
        gallery = centres[torch.randint(0, 20, (20000,), generator=generator)] + 0.1 * gallery
    if layout == "near_ties":  # many rows within float16 rounding of one another
        gallery = gallery[:50].repeat(400, 1) + 1e-5 * gallery
    if layout != "unnormalised":
        gallery = gallery / gallery.norm(dim=1, keepdim=True)
    else:
        gallery = gallery * 300.0
    search = ExactSearch(gallery)
    for row in range(0, 20000, 2500):
        query = gallery[row] + 0.3 * torch.randn(64, generator=generator) * gallery[row].norm() / 8
        scores, indices = search.search(query, 10)
        expected = _float64_top_k(gallery, query, 10)
        exact = gallery.double() @ query.double()
        # the same rows, or rows tied with them in float32: compare the scores they reach
        assert scores.double().tolist() == pytest.approx(exact[expected].tolist(), rel=1e-6, abs=1e-6)
        assert exact[indices].tolist() == pytest.approx(exact[expected].tolist(), rel=1e-6, abs=1e-6)
        if layout != "near_ties":
            assert indices.tolist() == expected.tolist()


def test_exact_search_shortlists_few_rows_and_handles_edge_cases():
    generator = torch.Generator().manual_seed(1)
    gallery = torch.nn.functional.normalize(torch.randn(5000, 32, generator=generator), dim=1)
    search = ExactSearch(gallery)
    query = gallery[7]
    bound = search.error_bound(query, query.half())
    assert 0 < bound < 1e-2  # float16 rounding of unit vectors: well under 0.01 of cosine
    assert search.search(query, 1)[1].tolist() == [7]
    assert len(search.search(query, 0)[1]) == 0
    assert sorted(search.search(query, 6000)[1].tolist()) == list(range(5000))  # k beyond the gallery
    assert ExactSearch(gallery * 1e5).coarse is None  # beyond float16 range: float32 alone
    with pytest.raises(ValueError, match="NaN"):
        ExactSearch(torch.full((3, 32), float("nan")))


def test_search_with_reranker_and_montage(archive, tmp_path):
    from medreco.inference import RerankerScorer

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
