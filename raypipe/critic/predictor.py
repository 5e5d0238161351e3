"""What every critic kind is to its consumers (augmentation, the agreement report, the citation
checker): the label distribution of each judgement's aspect. The LM critic (raypipe.critic.predict)
and the encoder critic (raypipe.critic.encoder_critic) implement it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from raypipe.prompts import ASPECT_LABELS, CriticExample


class ReflectionPredictor(ABC):
    """What the critic's consumers (augmentation, the agreement report, the citation checker) need from
    a critic, whatever its kind: `distributions` returns, per example, its aspect's label distribution
    as an array in ASPECT_LABELS order; `predict` the same as {label token: probability}."""

    @abstractmethod
    def distributions(self, examples: Sequence[CriticExample]) -> list[np.ndarray]: ...

    def predict(self, examples: Sequence[CriticExample]) -> list[dict[str, float]]:
        probs = self.distributions(examples)
        return [{token: float(p) for token, p in zip(ASPECT_LABELS[ex.aspect], row, strict=True)}
                for ex, row in zip(examples, probs, strict=True)]
