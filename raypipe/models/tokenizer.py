"""Tokenizers that know the reflection tokens.

Self-RAG adds every reflection token to the generator's vocabulary as one special token (paper §3.2.2,
"we expand the original vocabulary with reflection tokens"), so that the probability of a token such
as `[Relevant]` is one softmax entry that decoding can read and normalise over its group (Eq. 3-4).
Here the same holds for the tiny tokenizers trained locally and for any checkpoint loaded from disk.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from raypipe import tokens
from raypipe.errors import ModelError

logger = logging.getLogger(__name__)

BOS, EOS, PAD = "<s>", "</s>", "<pad>"


def _special(token: str) -> AddedToken:
    # normalized=False: the token is matched on the raw text, before byte-level mapping, so that
    # "[No Retrieval]" (which contains a space) stays whole even when glued to surrounding text.
    return AddedToken(token, special=True, normalized=False)


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `texts`, with bos/eos/pad and every reflection token as
    single special ids.

    Byte level means every string is encodable (no unknown token) and decoding is exact, which the
    training data relies on: an augmented output must survive encode/decode byte for byte. Like Llama's
    tokenizer it prepends `<s>` when `add_special_tokens=True` and adds no `</s>`, so code written for
    real Llama checkpoints behaves the same on the tiny one.
    """
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = [BOS, EOS, PAD, *tokens.SPECIAL_TOKENS]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[_special(t) for t in specials],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        extra_special_tokens=list(tokens.SPECIAL_TOKENS),
        add_bos_token=True,
        add_eos_token=False,
        # Clean-up rewrites " ." as "." on decode (the default before transformers 5), breaking round trips.
        clean_up_tokenization_spaces=False,
    )


def add_reflection_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[str, list[int]]:
    """Make every reflection token one special id and make sure a pad token exists.

    A base checkpoint (e.g. Llama-2-7B, SmolLM2) has none of the reflection tokens; a Self-RAG
    checkpoint has all of them. Returns each added token with the ids its text encoded to before (its
    pieces), from which `embeddings.resize_with_piece_means` starts its embedding row.
    """
    pieces = {t: tokenizer.encode(t, add_special_tokens=False) for t in tokens.SPECIAL_TOKENS}
    missing = {t: ids for t, ids in pieces.items() if len(ids) != 1}
    if missing:
        tokenizer.add_special_tokens(
            {"extra_special_tokens": [_special(t) for t in missing]}, replace_extra_special_tokens=False
        )
    if tokenizer.pad_token is None:
        # Batched generation needs a pad id; eos is the usual choice for Llama-family checkpoints.
        tokenizer.pad_token = tokenizer.eos_token
    return missing


def add_missing_special_tokens(tokenizer: PreTrainedTokenizerBase) -> int:
    """`add_reflection_tokens`, returning only how many tokens were added."""
    return len(add_reflection_tokens(tokenizer))


def reflection_token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """Every special-token string -> its id; ModelError when any token is not exactly one id, since
    group probabilities (Eq. 3-4) are read off single softmax entries."""
    ids: dict[str, int] = {}
    for token in tokens.SPECIAL_TOKENS:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1:
            raise ModelError(
                f"tokenizer {tokenizer.name_or_path!r} encodes {token!r} as {len(encoded)} ids {encoded}; "
                "load it with raypipe.models.load_tokenizer to add the reflection tokens"
            )
        ids[token] = encoded[0]
    return ids


def group_token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[tokens.Group, list[int]]:
    """The ids of each reflection group, in `tokens.GROUP_TOKENS` order."""
    ids = reflection_token_ids(tokenizer)
    return {group: [ids[t] for t in group_tokens] for group, group_tokens in tokens.GROUP_TOKENS.items()}
