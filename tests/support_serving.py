"""A small MoE serving job the serving tests share: its document, with the knobs they vary."""

from __future__ import annotations

from typing import Any


def serving_job_doc(
    decode_replicas: int = 1, name: str = "moe", spread: bool | None = None
) -> dict[str, Any]:
    """A 20B MoE (16 experts, top-2) served by a prefill pool of EP 4 and `decode_replicas` decode replicas that
    share EP 8; `spread` sets `placement.spread` (None: the reader's default)."""
    doc: dict[str, Any] = {
        "kind": "serving",
        "name": name,
        "device_kind": "H100",
        "model": {
            "parameters": 20e9,
            "expert_parameters": 16e9,
            "experts": 16,
            "top_k": 2,
            "hidden": 2048,
            "layers": 8,
            "heads": 16,
            "kv_heads": 4,
            "head_dim": 128,
            "weight_dtype": "fp8",
        },
        "pools": [
            {"role": "prefill", "ep": 4, "attention_dp": 4},
            {
                "role": "decode",
                "ep": 8 // decode_replicas,
                "attention_dp": 8 // decode_replicas,
                "replicas": decode_replicas,
            },
        ],
        "load": {"batch": 256, "prompt_tokens": 1000, "output_tokens": 100, "prefill_batch": 2},
    }
    if spread is not None:
        doc["placement"] = {"spread": spread}
    return doc
