"""Probe run by the job's python: which renderer the gateway would pick, and whether it bridges.

Usage: python3 _renderer_probe.py MODEL_DIR FAMILY TOOL_PARSER REASONING_PARSER
-> {"family", "reason", "bridge", "error"} on the last stdout line. It calls the gateway's own
choose_renderer, so the answer is the gateway's.
"""

import json
import sys

result = {"family": "", "reason": "", "bridge": "", "error": ""}
try:
    from agentcore_slime.gateway.family import CHAT_TEMPLATE_FAMILY, choose_renderer, load_tokenizer

    model_dir, family, tool, reasoning = sys.argv[1:5]
    tokenizer = load_tokenizer(model_dir)
    _, choice = choose_renderer(
        model_dir, tokenizer, family, tool_call_parser=tool or None, reasoning_parser=reasoning or None
    )
    result["family"], result["reason"] = choice.family, choice.reason
    if choice.family != CHAT_TEMPLATE_FAMILY:
        result["bridge"] = "the renderer's bridge_to_next_turn"
    else:  # CUMULATIVE_BRIDGE=template bridges ChatML templates only
        result["bridge"] = "the chat template's rendering of the new messages (the default bridge)"
except BaseException as exc:  # noqa: BLE001 - report, do not crash
    result["error"] = f"{type(exc).__name__}: {exc}"[:300]
print()
print(json.dumps(result))
