"""A word-piece vocabulary learned from a corpus, for language models trained from scratch.

A language model built from a preset (the `tiny` recipe) has no vocabulary of its own. Borrowing
MiniLM's 30,522 word pieces made its output layer, and TRL's loss over it, about 95% of every
stage-2 step on a CPU, although the training conversations use a few hundred distinct words. A
vocabulary learned from those conversations keeps the output layer as small as the text needs.
Pretrained language models keep their own tokenizer.

The vocabulary is chosen here rather than by `tokenizers.trainers.WordPieceTrainer`: that trainer
gives a different vocabulary on every call (hash-map order breaks its ties;
huggingface/tokenizers#1794), so a stage-2 run could not be repeated. The tokenizer itself, its
normalizer, pre-tokenizer, word-piece model and decoder, is the `tokenizers` one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}
CONTINUATION = "##"


def train_wordpiece_tokenizer(
    texts: Iterable[str] | Mapping[str, int],
    vocab_size: int = 2000,
    special_tokens: Sequence[str] = (),
    token_ids: Mapping[str, int] | None = None,
) -> PreTrainedTokenizerFast:
    """A lower-casing BERT-style word-piece tokenizer with at most `vocab_size` tokens, learned from
    `texts` (or a mapping of each text to how often it occurs), the same for the same texts: the
    special tokens (BERT's, then `special_tokens`), every character of the corpus (alone and as a
    continuation piece), then the corpus's words by frequency (ties alphabetical) as far as
    `vocab_size` allows. Words left out, or never seen, tokenize as pieces (the longest known prefix,
    then characters); characters the corpus never used become `[UNK]`. `token_ids` places tokens at
    given ids (each swapped with the token there), e.g. the image placeholder a model's config names."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    counts: Counter[str] = Counter()
    occurrences = texts if isinstance(texts, Mapping) else Counter(texts)  # conversations repeat their texts
    for text, repeats in occurrences.items():
        if text and text.strip():
            for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)):
                counts[word] += repeats
    if not counts:
        raise ValueError("cannot learn a vocabulary from no text")
    alphabet = sorted({character for word in counts for character in word})
    extra = [token for token in special_tokens if token not in SPECIAL_TOKENS.values()]
    vocabulary = [*SPECIAL_TOKENS.values(), *extra, *alphabet, *(CONTINUATION + c for c in alphabet)]
    if len(vocabulary) > vocab_size:
        raise ValueError(
            f"vocab_size={vocab_size} cannot hold the {len(SPECIAL_TOKENS) + len(extra)} special tokens and the "
            f"corpus's {len(alphabet)} characters (alone and as continuations); use at least {len(vocabulary)}"
        )
    known = set(vocabulary)
    words = sorted((word for word in counts if word not in known), key=lambda word: (-counts[word], word))
    vocabulary += words[: vocab_size - len(vocabulary)]
    for token, token_id in (token_ids or {}).items():
        if token not in vocabulary or not 0 <= token_id < len(vocabulary):
            raise ValueError(f"cannot place {token!r} at id {token_id} in a vocabulary of {len(vocabulary)} tokens")
        here = vocabulary.index(token)
        vocabulary[here], vocabulary[token_id] = vocabulary[token_id], vocabulary[here]
    tokenizer = Tokenizer(
        models.WordPiece(
            {token: i for i, token in enumerate(vocabulary)},
            unk_token=SPECIAL_TOKENS["unk_token"],
            continuing_subword_prefix=CONTINUATION,
        )
    )
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizer, pre_tokenizer
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
    if not extra:
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS, additional_special_tokens=extra)


__all__ = ["train_wordpiece_tokenizer"]
