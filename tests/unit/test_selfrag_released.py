"""The released Self-RAG checkpoint's code path (selfrag_llama2_7b), on vLLM: a tiny Llama saved in that
checkpoint's layout decodes through it unchanged.

The layout: a base vocabulary, then `<pad>` and the 15 reflection and paragraph tokens appended after
it as special tokens (ids 32000-32015 in the 7B checkpoint), the embeddings already that size, no
prompt-format record (so the Alpaca prompt of the released scripts) and no raypipe manifest. Decoded
with the released scripts' settings (adaptive retrieval at δ = 0.2, beam 2, weights 1 / 1 / 0.5).
When a local copy of the real checkpoint exists (RAYPIPE_SELFRAG_7B, default models/selfrag_llama2_7b),
it answers a question from its passage too; nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.prompts import SELFRAG_PROMPT
from raypipe.retrieval.types import Passage
from raypipe.settings.models import EngineConfig
from raypipe.tokens import RELEVANT, SPECIAL_TOKENS

pytestmark = pytest.mark.slow

CHECKPOINT = Path(os.environ.get("RAYPIPE_SELFRAG_7B", "models/selfrag_llama2_7b"))
#: the released scripts' decoding settings (run_short_form.py's defaults)
RELEASED = SelfRAGSettings(mode="adaptive", threshold=0.2, beam_width=2, max_depth=2, max_new_tokens=20,
                           w_is_rel=1.0, w_is_sup=1.0, w_is_use=0.5, top_k=1)
QUESTIONS = ["Who wrote Hamlet?", "When was the Calder Library founded?", "Name a tragedy."]


class OnePassage:
    def search(self, queries, k, requests=None):
        return [[Passage("w1", "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600.", 1.0)]
                for _ in queries]


@pytest.fixture(scope="module")
def released_layout_dir(tmp_path_factory, world_dir) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from raypipe.models import world_texts

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(world_texts(world_dir, limit=500), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>", add_bos_token=True, clean_up_tokenization_spaces=False)
    base = len(tokenizer)
    tokenizer.add_special_tokens({"pad_token": "<pad>", "additional_special_tokens": list(SPECIAL_TOKENS)})
    assert len(tokenizer) == base + 1 + len(SPECIAL_TOKENS)  # appended after the base vocabulary
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=512, **ids))
    model.generation_config = GenerationConfig(**ids)
    out = tmp_path_factory.mktemp("selfrag_released_layout")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_the_layout_loads_as_released_without_added_tokens_or_a_prompt_record(released_layout_dir):
    from raypipe.models.folder import load_tokenizer_and_added
    from raypipe.models.prompt_format import generator_prompt

    tokenizer, added = load_tokenizer_and_added(released_layout_dir)
    assert added == {}
    assert all(len(tokenizer.encode(t, add_special_tokens=False)) == 1 for t in SPECIAL_TOKENS)
    assert generator_prompt(released_layout_dir, tokenizer) == SELFRAG_PROMPT


def test_selfrag_decodes_the_released_layout_on_vllm_as_on_hf(released_layout_dir, vllm_engines):
    from raypipe.inference.engines import make_engine
    from raypipe.inference.engines.vllm import VLLMEngine
    from raypipe.methods.base import MethodRequest, Toolkit
    from raypipe.methods.selfrag.method import SelfRAG

    on_vllm = vllm_engines(released_layout_dir)
    assert isinstance(on_vllm, VLLMEngine) and on_vllm.prompt == SELFRAG_PROMPT
    on_hf = make_engine(released_layout_dir, EngineConfig(kind="hf", precision="fp32"), device="cpu")
    requests = [MethodRequest(q) for q in QUESTIONS]
    results = {name: SelfRAG(Toolkit(engine=engine, retriever=OnePassage())).decode(requests, RELEASED)
               for name, engine in (("vllm", on_vllm), ("hf", on_hf))}
    for got, want in zip(results["vllm"], results["hf"], strict=True):
        assert (got.text, got.n_retrievals, got.trace["raw"]) == (want.text, want.n_retrievals, want.trace["raw"])
        assert [c.passage_id for c in got.citations] == [c.passage_id for c in want.citations]
        assert got.trace["score"] == pytest.approx(want.trace["score"], abs=1e-4)
        for a, b in zip(got.trace["segments"], want.trace["segments"], strict=True):
            for group, probs in a["reflections"].items():
                assert list(probs.values()) == pytest.approx(list(b["reflections"][group].values()), abs=1e-4)


def test_the_real_checkpoint_answers_from_the_passage_when_present():
    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip(f"no released Self-RAG checkpoint at {CHECKPOINT} (set RAYPIPE_SELFRAG_7B)")
    from raypipe.inference.engines import make_engine
    from raypipe.methods.base import MethodRequest, Toolkit
    from raypipe.methods.selfrag.method import SelfRAG

    settings = SelfRAGSettings(mode="always", max_depth=1, max_new_tokens=50, top_k=1)
    method = SelfRAG(Toolkit(engine=make_engine(CHECKPOINT, EngineConfig(kind="vllm")), retriever=OnePassage()))
    result = method.decode([MethodRequest("Who wrote Hamlet?")], settings)[0]
    assert "Shakespeare" in result.text
    assert result.citations[0].passage_id == "w1"
    is_rel = result.trace["segments"][0]["reflections"]["is_rel"]
    assert is_rel[RELEVANT] > 0.5 and sum(is_rel.values()) == pytest.approx(1.0)
