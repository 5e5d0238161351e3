"""What CRAG's retrieval evaluator brings to the training loop as a small classifier (`raypipe.training.classifier`):
its cross-encoder and its loss, the MSE between tanh(head) and the +1 / -1 label (CRAG §4.2, App. B.3:
the paper regresses T5-large to the same targets)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raypipe.prompts import as_document
from raypipe.training.classifier import ClassifierTask
from raypipe.training.task import model_device


@dataclass(frozen=True)
class EvaluatorTask(ClassifierTask):
    """Pairs are cut to `max_length` tokens from the document's end (`only_second`): the question is
    short and must survive whole."""

    max_length: int

    def load(self, base_model: str) -> tuple[Any, Any]:
        from raypipe.retrieval.cross_encoder import load_cross_encoder

        return load_cross_encoder(base_model)

    def loss(self, model: Any, tokenizer: Any, rows: list[dict[str, Any]]) -> Any:
        import torch

        device = model_device(model)
        enc = tokenizer([r["query"] for r in rows], [as_document(r["title"], r["text"]) for r in rows],
                        padding=True, truncation="only_second", max_length=self.max_length,
                        return_tensors="pt").to(device)
        labels = torch.tensor([r["label"] for r in rows], dtype=torch.float32, device=device)
        scores = torch.tanh(model(**enc).logits[:, 0])
        return torch.nn.functional.mse_loss(scores, labels)
