"""Rows for tokens added to a pretrained vocabulary: each starts at the mean of its own text's pieces.

A reflection token such as `[Irrelevant]` is new to a base checkpoint, but the pieces the base
tokenizer splits its text into (`[`, `Ir`, `relevant`, `]`) are not. Starting the new row at the mean
of those pieces' rows (input embedding, and output embedding when untied) has two properties:

- The scale is the pretrained one. The row is an average of trained rows, so its norm is at most
  theirs, and its output logit h·e is the mean of the pieces' logits, so it can never exceed the
  largest of them: the new tokens do not take over the pretrained next-token distribution before
  fine-tuning (Hewitt 2021, "Initializing new word embeddings for pretrained language models", makes
  the same argument for the mean of all rows). A random row at `initializer_range` scale has neither
  guarantee.
- The tokens are told apart from the first step. The mean of all rows, the other common choice, gives
  all 15 tokens the same row: `[Relevant]` and `[Irrelevant]`, or `[Utility:1]` and `[Utility:5]`,
  are then the same input and (with tied embeddings, as in SmolLM2) the same output until training
  separates them. Piece means differ wherever the texts differ and carry what the model already knows
  about the words.

A token whose text has no known piece (impossible for a byte-level tokenizer) gets the mean of all rows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


def _tied(model: PreTrainedModel) -> bool:
    out = model.get_output_embeddings()
    return out is None or out.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


@torch.no_grad()
def resize_with_piece_means(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                            pieces: Mapping[str, list[int]]) -> int:
    """Grow the embeddings to `len(tokenizer)` rows; each token of `pieces` (token -> the ids its text
    had before it was added) starts at the mean of those ids' rows, every other new row at the mean of
    the old rows. Returns the number of rows added."""
    old = model.get_input_embeddings().num_embeddings
    if len(tokenizer) <= old:
        return 0
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    matrices = [model.get_input_embeddings().weight]
    if not _tied(model):
        matrices.append(model.get_output_embeddings().weight)
    by_id = {tokenizer.convert_tokens_to_ids(t): [i for i in ids if i < old] for t, ids in pieces.items()}
    for weight in matrices:
        mean = weight[:old].float().mean(dim=0)
        for row in range(old, weight.shape[0]):
            known = by_id.get(row)
            value = weight[known].float().mean(dim=0) if known else mean
            weight[row] = value.to(weight.dtype)
    logger.debug("added %d embedding rows (%d from their pieces)", len(tokenizer) - old, len(by_id))
    return len(tokenizer) - old
