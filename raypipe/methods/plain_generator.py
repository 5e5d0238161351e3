"""The plain generator that `rag`, `crag` and `direct` answer with (CRAG §5.2, App. B.3 "Generator"):
the knowledge k (empty for `direct`) and the input x in one prompt, one greedy continuation, in one
engine call for the whole batch.

Two generators, as the CRAG paper's two row groups:
- `lm`: an instruct LM through its chat template (the paper's LLaMA2-hf-7b rows; here SmolLM2-135M-
  Instruct by default). The wording of the user turn is ours (the paper does not give it);
- `engine`: the Self-RAG generator used as a plain generator (the SelfRAG-LLaMA2-7b rows): its own
  prompt format with k as one retrieved paragraph after `[Retrieval]`, as the released checkpoints
  read retrieved passages; reflection tokens are removed from its answer.
Closed-set requests map the answer onto an option (the lenient matching of closed_set.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from raypipe.inference.engines.base import Engine, GenerationParams
from raypipe.methods.base import MethodRequest, MethodResult
from raypipe.methods.closed_set import aggregate_options
from raypipe.prompts import chat_prompt
from raypipe.tokens import RETRIEVAL, format_paragraph, strip_reflection


def lm_user_turn(request: MethodRequest, knowledge: str) -> str:
    task = "\n\n".join(p for p in (request.instruction, request.input) if p)
    if not knowledge:
        return task
    return f"Refer to the following knowledge and answer.\n\nKnowledge:\n{knowledge}\n\n{task}"


def engine_prompt(engine: Engine, request: MethodRequest, knowledge: str) -> str:
    prompt = engine.prompt(request.instruction, request.input)
    return prompt + RETRIEVAL + format_paragraph("", knowledge) if knowledge else prompt


def generate_answers(engine: Engine, kind: str, requests: Sequence[MethodRequest], knowledge: Sequence[str],
                     max_new_tokens: int) -> list[MethodResult]:
    """One engine call for the batch; `kind` is `lm` (chat template) or `engine` (Self-RAG format)."""
    if kind == "lm":
        prompts = [chat_prompt(engine.tokenizer, lm_user_turn(r, k)) for r, k in zip(requests, knowledge, strict=True)]
    else:
        prompts = [engine_prompt(engine, r, k) for r, k in zip(requests, knowledge, strict=True)]
    params = GenerationParams(max_new_tokens=max_new_tokens, return_probs=False)
    generations = engine.generate(prompts, params) if prompts else []
    results = []
    for request, g in zip(requests, generations, strict=True):
        result = MethodResult(text=strip_reflection(g.text).strip())
        if request.options:
            answer = aggregate_options([(result.text, 1.0)], request.options)
            result.option, result.option_scores = answer.option, answer.scores
        results.append(result)
    return results
