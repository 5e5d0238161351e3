"""Prompt formats: the Alpaca layout or the model's chat template, chosen at training and recorded."""

from __future__ import annotations

import pytest

from raypipe.errors import ConfigError, ModelError
from raypipe.models.prompt_format import generator_prompt, record_format, recorded_format, resolve_format
from raypipe.prompts import GeneratorPrompt, format_generator_prompt
from raypipe.training.encode import IGNORE_INDEX, encode_row

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


class ChatTokenizer:
    """Characters as ids, with a chat template (a stand-in for an instruct model's tokenizer)."""

    chat_template = TEMPLATE
    eos_token_id = 0

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        from jinja2 import Template

        assert not tokenize
        return Template(TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt)

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        return {"input_ids": [ord(c) for c in text], "offset_mapping": [(i, i + 1) for i in range(len(text))]}


class PlainTokenizer:
    chat_template = None


def test_chat_prompts_put_instruction_and_input_in_the_users_turn():
    chat = GeneratorPrompt("chat", ChatTokenizer())
    assert chat("Q?") == "<|user|>Q?<|end|><|assistant|>"
    assert chat("Q?", "[1] doc") == "<|user|>Q?\n\n[1] doc<|end|><|assistant|>"
    assert GeneratorPrompt()("Q?", "x") == format_generator_prompt("Q?", "x")
    with pytest.raises(ValueError, match="chat template"):
        GeneratorPrompt("chat", PlainTokenizer())


def test_auto_keeps_a_record_else_follows_the_chat_template(tmp_path):
    assert resolve_format("auto", tmp_path, ChatTokenizer()) == "chat"
    assert resolve_format("auto", tmp_path, PlainTokenizer()) == "selfrag"
    assert resolve_format("selfrag", tmp_path, ChatTokenizer()) == "selfrag"
    with pytest.raises(ConfigError, match="no chat template"):
        resolve_format("chat", tmp_path, PlainTokenizer())
    record_format(tmp_path, "selfrag")  # e.g. a stage trained from a released checkpoint's layout
    assert resolve_format("auto", tmp_path, ChatTokenizer()) == "selfrag"


def test_a_folder_without_a_record_is_read_in_the_alpaca_layout(tmp_path):
    assert recorded_format(tmp_path) is None
    assert generator_prompt(tmp_path, ChatTokenizer()).name == "selfrag"
    record_format(tmp_path, "chat")
    assert generator_prompt(tmp_path, ChatTokenizer())("Q?") == "<|user|>Q?<|end|><|assistant|>"
    (tmp_path / "prompt_format.json").write_text('{"format": "markdown"}')
    with pytest.raises(ModelError, match="prompt_format.json.*markdown"):
        recorded_format(tmp_path)


def test_training_rows_are_written_in_the_chosen_format_and_the_prompt_stays_out_of_the_loss():
    tok = ChatTokenizer()
    row = {"id": "r1", "instruction": "Q?", "input": "", "output": "It is 7."}
    enc = encode_row(row, tok, ["prompt"], 256, prompt_format=GeneratorPrompt("chat", tok))
    prompt = "<|user|>Q?<|end|><|assistant|>"
    assert enc.input_ids[: len(prompt)] == [ord(c) for c in prompt]
    assert enc.labels[: len(prompt)] == [IGNORE_INDEX] * len(prompt)
    assert "".join(chr(t) for t in enc.labels[len(prompt):-1]) == "It is 7."
    # a Self-Reasoning row (instruction/input/target) goes through the same format
    sr = encode_row({"id": "s", "instruction": "Q?", "input": "[1] d", "target": "Relevant: True"}, tok,
                    ["prompt"], 256, prompt_format=GeneratorPrompt("chat", tok))
    assert sr.input_ids[: len("<|user|>Q?\n\n[1] d")] == [ord(c) for c in "<|user|>Q?\n\n[1] d"]
