"""Rank reference studies by their similarity to a query study, about one finding, with plain transformers.

    python examples/retrieval_quickstart.py MODEL QUERY REFERENCE [REFERENCE ...] \
        --entity "pleural effusion" --modality chest_xray

MODEL: a retrieval folder (`medreco train stage1`'s `final/`, `medreco export`) or Hub id. Images are
DICOM files, DICOM series folders, NIfTI, PNG or JPEG of one modality. Without `--entity`, whole-image
similarity. Works without medreco installed: the model folder carries its code. For archives, use
`medreco index` and `medreco search`, which cache the encodings."""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModel, AutoProcessor


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("query")
    parser.add_argument("references", nargs="+")
    parser.add_argument("--entity", help="the finding, anatomy or disease to compare by (free text)")
    parser.add_argument("--modality", default="chest_xray")
    args = parser.parse_args(argv)

    processor = AutoProcessor.from_pretrained(args.model, trust_remote_code=True)
    model = AutoModel.from_pretrained(args.model, trust_remote_code=True).eval()
    with torch.no_grad():
        images = processor(images=[args.query, *args.references], modalities=args.modality)
        entity = model.get_text_embeddings(**processor(text=[args.entity])) if args.entity else None
        output = model.get_image_features(**images, entity_embeddings=entity, pairwise=entity is not None)
        features = output.features[0] if entity is not None else output.features
        scores = model.score(features[:1], features[1:])
    about = f"about {args.entity!r}" if args.entity else "whole image"
    print(f"references ranked by similarity to {args.query} ({about}):")
    for rank, index in enumerate(scores.argsort(descending=True).tolist(), start=1):
        print(f"{rank:>3}. {scores[index]:+.3f}  {args.references[index]}")


if __name__ == "__main__":
    main()
