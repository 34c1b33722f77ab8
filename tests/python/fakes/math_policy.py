"""A scripted policy model for the example math agent (examples/math_agent), for FakeSGLang.

For each GSM8K question the first turn calls the calculator with the problem's expression;
once the tool's result is in the prompt, the answer is that result ("right") or the result
plus one ("wrong"), written as ``\\boxed{N}``. Used in-process by the e2e tests and by the
``sglang.launch_server`` stand-in (fakes/sglang_shim), which reads the script from a JSON file.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fakes.sglang_server import Completion, Policy


def math_policy(model_path: str, script: dict[str, dict[str, str]]) -> Policy:
    """The policy for ``script``: question -> ``{"expression": ..., "plan": "right" | "wrong"}``.

    :param model_path: the HF directory with the (toy) tokenizer.
    :param script: what to do with each question the agent asks.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def reply(prompt: str) -> str:
        question = prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
        plan = script[question]
        if "<tool_response>" not in prompt:
            call = {"name": "calculator", "arguments": {"expression": plan["expression"]}}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        result = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)[-1].strip()
        value = str(int(result) + 1) if plan["plan"] == "wrong" else result
        return f"The calculator says {result}, so the answer is \\boxed{{{value}}}."

    def policy(input_ids: list[int], sampling_params: dict[str, Any]) -> Completion:
        text = reply(tokenizer.decode(input_ids, skip_special_tokens=False))
        ids = [*tokenizer.encode(text, add_special_tokens=False), stop]
        return Completion(ids, {"type": "stop", "matched": stop})

    return policy
