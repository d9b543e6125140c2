"""The one schema of every input file (`documents`, pydantic models) and its JSON Schema (draft 2020-12), which
`placement schema KIND`, schemas/*.schema.json and docs/formats.md (`reference`) are made from."""

from __future__ import annotations

from typing import Any

from placement.schema.documents import DOCUMENTS

__all__ = ["DIALECT", "DOCUMENTS", "json_schema"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _drop_titles(node: Any, top: bool = True) -> Any:
    """The schema without pydantic's per-field titles (the field's name again), keeping the document's own."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "title" and isinstance(v, str) and not top:
                continue
            if k == "properties" and isinstance(v, dict):
                out[k] = {name: _drop_titles(sub, False) for name, sub in v.items()}
            else:
                out[k] = _drop_titles(v, False)
        return out
    if isinstance(node, list):
        return [_drop_titles(x, False) for x in node]
    return node


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one kind of file; KeyError for an unknown kind."""
    model = DOCUMENTS[kind]
    body = _drop_titles(model.model_json_schema(mode="validation"))
    defs = body.pop("$defs", None)
    for d in (defs or {}).values():
        d.pop("title", None)
    out: dict[str, Any] = {"$schema": DIALECT}
    out.update(body)
    if defs:
        out["$defs"] = defs
    return out
