"""A word-piece vocabulary learned from a corpus, for language models trained from scratch.

A language model built from a preset (the `tiny` recipe) has no vocabulary of its own. Borrowing
MiniLM's 30,522 word pieces made its output layer, and TRL's loss over it, about 95% of every
stage-2 step on a CPU, although the training conversations use a few hundred distinct words. A
vocabulary learned from those conversations keeps the output layer as small as the text needs.
Pretrained language models keep their own tokenizer."""

from __future__ import annotations

from collections.abc import Iterable

from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}


def train_wordpiece_tokenizer(texts: Iterable[str], vocab_size: int = 2000) -> PreTrainedTokenizerFast:
    """A lower-casing BERT-style word-piece tokenizer with at most `vocab_size` tokens, learned from
    `texts`. Every character of the corpus is in the vocabulary, so words the corpus never spelled
    out still tokenize (as pieces); characters it never used become `[UNK]`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size={vocab_size} leaves no room beyond the {len(SPECIAL_TOKENS)} special tokens")
    tokenizer = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()))
    texts = [text for text in texts if text and text.strip()]
    if not texts:
        raise ValueError("cannot learn a vocabulary from no text")
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)


__all__ = ["train_wordpiece_tokenizer"]
