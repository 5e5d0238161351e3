"""Training only the top layers of a pretrained model (`training.*.trainable_layers`): an LM here, and
the encoder critic's encoder (raypipe.critic.encoder_model) through the same `freeze_bottom`.

On CPU the backward pass costs about twice the forward, and most of it goes to the lower transformer
layers. With the lower layers frozen *and* no gradient flowing into them, the backward stops at the
first trainable layer, and the frozen layers run without autograd bookkeeping (less activation
memory). What still learns: the top `n` layers, the final norm, and the output embedding, which holds
the rows of the added reflection tokens; a generator that could not move those rows could not learn
when to emit `[Retrieval]` or `[Utility:5]`.

To stop the gradient below the trainable layers, the input embedding's output is detached. With tied
embeddings (SmolLM2, Llama-3.2) the shared matrix then learns from its use as the output layer only;
an untied input embedding is frozen with the lower layers. Either way the added tokens' input rows
keep (or, tied, start from) the mean of their text pieces (`raypipe.models.embeddings`), which already
places them near the words they spell.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from raypipe.errors import ConfigError

logger = logging.getLogger(__name__)


def _decoder_layers(model: Any) -> Any:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ConfigError(f"trainable_layers: {type(model).__name__} has no decoder layer list (model.layers); "
                          "leave training.*.trainable_layers unset to train every layer")
    return layers


def _detach_output(module: Any, args: Any, output: Any) -> Any:
    return output.detach()


def freeze_bottom(layers: Sequence[Any], trainable_layers: int | None, *below: Any) -> int:
    """Freeze all but the top `trainable_layers` of `layers` and, when any layer is frozen, the modules
    `below` them (the embeddings); returns how many layers froze. None, or a count >= the number of
    layers, changes nothing."""
    if trainable_layers is None or trainable_layers >= len(layers):
        return 0
    frozen = len(layers) - trainable_layers
    for module in [*layers[:frozen], *below]:
        module.requires_grad_(False)
    return frozen


def freeze_lower_layers(model: Any, trainable_layers: int) -> dict[str, int]:
    """Freeze all but the top `trainable_layers` decoder layers (and the input embedding's gradient
    path); returns the counts of trainable and frozen parameters. `trainable_layers` >= the number of
    layers changes nothing."""
    layers = _decoder_layers(model)
    embedding = model.get_input_embeddings()
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is embedding.weight
    frozen = freeze_bottom(layers, trainable_layers, *(() if tied else (embedding,)))
    if frozen == 0:
        return {"trainable": sum(p.numel() for p in model.parameters()), "frozen": 0, "frozen_layers": 0}
    embedding.register_forward_hook(_detach_output)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    logger.info("training the top %d of %d layers: %d of %d parameters trainable", len(layers) - frozen,
                len(layers), trainable, total)
    return {"trainable": trainable, "frozen": total - trainable, "frozen_layers": frozen}
