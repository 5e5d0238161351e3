"""The DeepSpeed config: a JSON template whose "auto" values are filled from our ModelTrainConfig.

Tuning knobs that only DeepSpeed understands (bucket sizes, persistence threshold) stay in the JSON
file; values that our config owns (batch geometry, ZeRO stage, precision, clipping) are filled here,
and a JSON file that hard-codes a different value for one of them is an error rather than a silent
disagreement between the two files. No "optimizer" block: the loop passes torch's AdamW, which avoids
compiling DeepSpeed's fused/CPU Adam C++ ops on first use (a minute or more on a small CPU).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from raypipe.errors import ConfigError
from raypipe.settings.training import ModelTrainConfig

AUTO = "auto"


def _managed_values(cfg: ModelTrainConfig, bf16: bool) -> dict[str, Any]:
    return {
        "train_batch_size": cfg.micro_batch_size * cfg.grad_accum * cfg.num_workers,
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "gradient_clipping": cfg.grad_clip,
        "bf16.enabled": bf16,
        "zero_optimization.stage": cfg.zero_stage,
    }


def fill_deepspeed_config(template: dict[str, Any], cfg: ModelTrainConfig, *, bf16: bool,
                          source: str = "<template>") -> dict[str, Any]:
    """A copy of `template` with our values at the managed keys (dotted paths)."""
    out = copy.deepcopy(template)
    if "optimizer" in out or "scheduler" in out:
        raise ConfigError(f"{source}: remove the 'optimizer'/'scheduler' blocks; training.*.lr, "
                          "warmup_ratio and weight_decay drive torch's AdamW and the linear schedule")
    for dotted, value in _managed_values(cfg, bf16).items():
        *parents, leaf = dotted.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        current = node.get(leaf, AUTO)
        if current != AUTO and current != value:
            raise ConfigError(f"{source}: {dotted} is {current!r} but the training config implies {value!r}; "
                              f"set it to \"auto\"")
        node[leaf] = value
    return out


def load_deepspeed_config(cfg: ModelTrainConfig, *, bf16: bool) -> dict[str, Any]:
    path = Path(cfg.deepspeed_config)
    if not path.is_file():
        raise ConfigError(f"DeepSpeed config not found: {path} (training.*.deepspeed_config)")
    try:
        template = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    return fill_deepspeed_config(template, cfg, bf16=bf16, source=str(path))
