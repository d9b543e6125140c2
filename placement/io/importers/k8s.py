"""Import Kubernetes nodes (``kubectl get nodes -o json``) as a native cluster dict, levels from node labels.

Owns reading the node list only; `placement.io.native` validates and loads the dict `parse_k8s_nodes` returns.

Interpretation:

* ``levels`` are node-label keys in Kueue TAS order, coarse -> fine, e.g.
  ``cloud.google.com/gce-topology-block, cloud.google.com/gce-topology-subblock,
  cloud.google.com/gce-topology-host, kubernetes.io/hostname`` or
  ``topology.k8s.aws/network-node-layer-1, -layer-2, -layer-3, kubernetes.io/hostname``.
* The finest key identifies the host. If it is ``kubernetes.io/hostname`` its value is the host name and
  it is not a level of its own (the host level is always ``node``). Otherwise the host name is
  ``metadata.name`` and the finest key is a level like the others (e.g. ``gce-topology-host`` without
  the hostname key gives a level ``host`` whose domains usually hold one node each).
  ``kubernetes.io/hostname`` anywhere but last is an error.
* Level names default to a short form of the key: the part after ``/``, without ``gce-topology-``,
  ``topology-``, ``network-node-`` or ``host.`` in front and ``_id``/``-id`` at the end, with a separator
  before a trailing number dropped (``gce-topology-block`` -> ``block``, ``network-node-layer-3`` ->
  ``layer3``, ``topology-rack`` -> ``rack``, ``host.rack_id`` -> ``rack``). They must be unique and not
  ``node``; otherwise pass ``level_names``, one name per level key in the same coarse -> fine order as
  ``levels`` (leaving out ``kubernetes.io/hostname`` when it names the host). The returned ``levels``
  are bottom-up, as the native format wants.
* GPUs per node: ``status.allocatable[gpu_resource]``, else ``status.capacity[gpu_resource]``, else the
  GPU Operator label ``nvidia.com/gpu.count``; ``kind`` is the label ``nvidia.com/gpu.product`` when
  present. A node with 0 GPUs is skipped with a warning. A node with no GPU count at all is skipped with
  a warning when it also carries none of the level labels (a CPU/system node); if it does carry level
  labels it is an error (wrong ``gpu_resource``?).
* Label values are taken as global ids (as GKE and EKS publish them): the same value under two different
  parents is an error naming both places, never silently renamed.
* If the coarsest level has several values, a level ``cluster`` with the single domain ``cluster`` is
  added on top. Hosts keep the order of ``items``.
* A level from an NVLink-domain label (`NVLINK_LABELS`: the GPU Operator's ``nvidia.com/gpu.clique``, the
  partition of a GB200 NVL72; topograph's ``accelerator.topograph.run/domain`` and ``sub-domain``) gets
  ``nvlink: true``: NVLS runs across its hosts.

Returns ``(cluster, warnings)`` like the Slurm importers; problems raise `InputError` with item paths
such as ``items[3].metadata.labels["cloud.google.com/gce-topology-block"]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from placement.errors import InputError, InternalError, Problem, Problems
from placement.io.importers.detect import refuse_other_format
from placement.io.importers.levels import check_level_names

__all__ = ["HOSTNAME_LABEL", "NVLINK_LABELS", "parse_k8s_nodes", "short_level_name"]

HOSTNAME_LABEL = "kubernetes.io/hostname"
NVLINK_LABELS = frozenset(
    {"nvidia.com/gpu.clique", "accelerator.topograph.run/domain", "accelerator.topograph.run/sub-domain"}
)
"""Labels whose values are NVLink domains across hosts: the GPU Operator's NVLink partition
(``<ClusterUUID>.<CliqueID>``) and topograph's accelerator domains (topograph ``docs/reference/node-labels.md``)."""
_GPU_COUNT_LABEL = "nvidia.com/gpu.count"
_GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_PREFIXES = ("gce-topology-", "topology-", "network-node-", "host.")
_SHOWN = 8  # names listed in one warning

Result = tuple[dict[str, Any], list[str]]


def short_level_name(key: str) -> str:
    """The default level name of a label key: ``cloud.google.com/gce-topology-block`` -> ``block``."""
    name = key.rsplit("/", 1)[-1]
    for prefix in _PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
    for suffix in ("_id", "-id"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    name = re.sub(r"[-_.]([0-9]+)$", r"\1", name)
    name = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_").lower()
    return name or key


def parse_k8s_nodes(
    text_or_obj: str | bytes | Mapping[str, Any],
    source: str,
    *,
    levels: Sequence[str] | str,
    level_names: Sequence[str] | None = None,
    gpu_resource: str = "nvidia.com/gpu",
    name: str | None = None,
) -> Result:
    """Read ``kubectl get nodes -o json`` (a List/NodeList, or one Node; YAML works too).

    `levels` are the label keys coarse -> fine (a list, or one comma-separated string). `name` is the
    cluster name (default: the source file name without its suffix).
    """
    problems = Problems(source)
    warnings: list[str] = []
    keys = _level_keys(levels, problems)
    host_key = HOSTNAME_LABEL if keys and keys[-1] == HOSTNAME_LABEL else None
    level_keys = keys[:-1] if host_key else keys
    names = _level_names(level_keys, level_names, problems)
    problems.raise_if_any()  # a bad `levels`/`level_names` argument would make every node look wrong

    doc = _load(text_or_obj, problems)
    items = _items(doc, problems) if doc is not None else []

    if names is None:  # None only together with a problem, raised above
        raise InternalError("the Kubernetes level names are unknown, but no problem was recorded")
    label_keys = _LabelKeys(level_keys, host_key, list(names), gpu_resource)
    hosts: list[dict[str, Any]] = []
    first_host: dict[str, str] = {}
    # level index (coarse -> fine) -> value -> (parent value, where first seen)
    parent_of: list[dict[str, tuple[str | None, str]]] = [{} for _ in level_keys]
    skipped: dict[str, list[str]] = {"no_gpu": [], "zero_gpu": []}
    for item, path in items:
        node = _read_node(item, path, label_keys, first_host, skipped, problems)
        if node is None:
            continue
        host, values, devices, kind = node
        _check_parents(values, path, label_keys, parent_of, problems)
        entry: dict[str, Any] = {
            "name": host,
            "domains": {names[i]: values[i] for i in reversed(range(len(level_keys)))},
            "devices": devices,
        }
        if kind is not None:
            entry["kind"] = kind
        hosts.append(entry)
    warnings += _skipped_warnings(skipped, gpu_resource)
    if not hosts and not problems:
        problems.add(
            "items", f'no node has a "{gpu_resource}" count above 0 and the level labels; nothing to import'
        )
    problems.raise_if_any()
    return {
        "name": name or _stem(source),
        "levels": _out_levels(label_keys, hosts, source),
        "hosts": hosts,
    }, warnings


@dataclass(frozen=True)
class _LabelKeys:
    """What `parse_k8s_nodes` reads from each node: the level label keys (coarse -> fine), the host label key
    (None: the node's name), the levels' names, and the GPU resource."""

    levels: list[str]
    host: str | None
    names: list[str]
    gpu_resource: str


def _read_node(
    item: Any,
    path: str,
    keys: _LabelKeys,
    first_host: dict[str, str],
    skipped: dict[str, list[str]],
    problems: Problems,
) -> tuple[str, list[str], int, str | None] | None:
    """One node's host name, level label values, GPU count and kind; None (with a problem, or counted in
    `skipped`) when it is not a GPU node of the cluster."""
    node = _node_view(item, path, problems)
    if node is None:
        return None
    meta_name, labels = node
    label_name = meta_name or path or "the node"
    before = len(problems.items)
    devices = _gpu_count(item, path, keys.gpu_resource, label_name, problems)
    if len(problems.items) > before:
        return None
    if devices is None:
        if any(k in labels for k in keys.levels):
            problems.add(
                f"{path}.status.allocatable" if path else "status.allocatable",
                f'node "{label_name}" has level labels but no "{keys.gpu_resource}" in allocatable '
                f'or capacity and no label "{_GPU_COUNT_LABEL}"; check gpu_resource',
            )
        else:
            skipped["no_gpu"].append(label_name)
        return None
    if devices[0] == 0:
        skipped["zero_gpu"].append(f"{label_name}{devices[1]}")
        return None
    ok = True
    values: list[str] = []
    for key in keys.levels:
        value = labels.get(key)
        if not isinstance(value, str) or not value.strip():
            ok = False
            what = "missing" if value is None else f"empty or not a string ({value!r})"
            problems.add(
                _label_path(path, key),
                f'{what} on node "{label_name}"; every GPU node needs all {len(keys.levels)} level labels',
            )
        values.append(value if isinstance(value, str) else "")
    host = _host_name(path, keys.host, meta_name, labels, label_name, first_host, problems)
    if host is None or not ok:
        return None
    kind = labels.get(_GPU_PRODUCT_LABEL)
    return host, values, devices[0], kind if isinstance(kind, str) and kind.strip() else None


def _host_name(
    path: str,
    host_key: str | None,
    meta_name: str | None,
    labels: Mapping[str, Any],
    label_name: str,
    first_host: dict[str, str],
    problems: Problems,
) -> str | None:
    """The node's host name (its host label, else its name), unique among the nodes; None after a problem."""
    ok = True
    if host_key is not None:
        host = labels.get(host_key)
        if not isinstance(host, str) or not host.strip():
            ok = False
            problems.add(_label_path(path, host_key), f'missing on node "{label_name}"; it names the host')
            host = ""
    else:
        host = meta_name or ""
    if host and host in first_host:
        ok = False
        where = _label_path(path, host_key) if host_key else _meta_path(path, "name")
        problems.add(
            where, f'host "{host}" appears twice (first at {first_host[host]}); host names must be unique'
        )
    elif host:
        first_host[host] = path or "the node"
    return host if ok else None


def _check_parents(
    values: list[str],
    path: str,
    keys: _LabelKeys,
    parent_of: list[dict[str, tuple[str | None, str]]],
    problems: Problems,
) -> None:
    """Each level value has one parent value across the nodes (label values are global ids)."""
    display = keys.names
    for i in range(len(keys.levels)):
        up = values[i - 1] if i > 0 else None
        seen = parent_of[i].get(values[i])
        here = _label_path(path, keys.levels[i])
        if seen is None:
            parent_of[i][values[i]] = (up, here)
        elif seen[0] != up:
            problems.add(
                here,
                f'{display[i]} "{values[i]}" is under {display[i - 1]} "{up}" here but '
                f'under {display[i - 1]} "{seen[0]}" at {seen[1]}; label values must be '
                "global ids (one parent each)",
            )


def _skipped_warnings(skipped: dict[str, list[str]], gpu_resource: str) -> list[str]:
    warnings: list[str] = []
    if skipped["no_gpu"]:
        warnings.append(
            f'skipped {len(skipped["no_gpu"])} node(s) without "{gpu_resource}" and without level labels '
            f"(CPU/system nodes): {_listing(skipped['no_gpu'])}"
        )
    if skipped["zero_gpu"]:
        warnings.append(
            f'skipped {len(skipped["zero_gpu"])} node(s) with 0 "{gpu_resource}": {_listing(skipped["zero_gpu"])}'
        )
    return warnings


def _out_levels(keys: _LabelKeys, hosts: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """The native levels bottom up, and ``cluster`` on top (added to every host) when the top level has
    several domains or there is no level."""
    display = keys.names
    out_levels: list[dict[str, Any]] = [{"name": "node"}]
    for key, n in reversed(list(zip(keys.levels, display, strict=True))):
        # the GPU Operator's NVLink partition label: a multi-node NVLink domain (GB200 NVL72), NVLS across it
        out_levels.append({"name": n, "nvlink": True} if key in NVLINK_LABELS else {"name": n})
    tops = {h["domains"][display[0]] for h in hosts} if keys.levels else set()
    if len(tops) > 1 or not keys.levels:
        if "cluster" in display:
            raise InputError(
                source,
                [
                    Problem(
                        "level_names",
                        'the name "cluster" is taken by the level added '
                        "above several top domains; pick another",
                    )
                ],
            )
        out_levels.append({"name": "cluster"})
        for h in hosts:
            h["domains"]["cluster"] = "cluster"
    return out_levels


# ---------------------------------------------------------------------------------------------------------


def _level_keys(levels: Sequence[str] | str, problems: Problems) -> list[str]:
    raw: list[Any] = [p.strip() for p in levels.split(",")] if isinstance(levels, str) else list(levels)
    keys: list[str] = []
    for i, key in enumerate(raw):
        if not isinstance(key, str) or not key.strip():
            problems.add(f"levels[{i}]", f"must be a non-empty label key, got {key!r}")
            continue
        if key in keys:
            problems.add(f"levels[{i}]", f'"{key}" is listed twice')
            continue
        keys.append(key.strip())
    if not raw:
        problems.add(
            "levels",
            "is empty; give the topology label keys coarse -> fine, e.g. "
            f"cloud.google.com/gce-topology-block,...,{HOSTNAME_LABEL}",
        )
    if HOSTNAME_LABEL in keys[:-1]:
        problems.add("levels", f'"{HOSTNAME_LABEL}" must be the finest (last) key, as in Kueue TAS')
    return keys


def _level_names(keys: list[str], level_names: Sequence[str] | None, problems: Problems) -> list[str] | None:
    if level_names is None:
        names = [short_level_name(k) for k in keys]
        first: dict[str, str] = {}
        ok = True
        for key, short in zip(keys, names, strict=True):
            if short == "node":
                ok = False
                problems.add(
                    "levels", f'"{key}" shortens to "node", the name of the host level; pass level_names'
                )
            elif short in first:
                ok = False
                problems.add(
                    "levels",
                    f'"{first[short]}" and "{key}" both shorten to the level name '
                    f'"{short}"; pass level_names with {len(keys)} unique names, '
                    "coarse -> fine",
                )
            else:
                first[short] = key
        return names if ok else None
    given = [level_names] if isinstance(level_names, str) else list(level_names)
    if len(given) != len(keys):
        listed = ", ".join(keys) or "none"
        problems.add(
            "level_names",
            f"has {len(given)} name(s) but there are {len(keys)} level key(s) to "
            f"name ({listed}); give one name per key, coarse -> fine "
            f"({HOSTNAME_LABEL} names the host and gets none)",
        )
        return None
    return check_level_names(given, problems)


def _load(text_or_obj: str | bytes | Mapping[str, Any], problems: Problems) -> Any:
    if isinstance(text_or_obj, Mapping):
        return text_or_obj
    if isinstance(text_or_obj, bytes):
        try:
            text = text_or_obj.decode("utf-8")
        except UnicodeDecodeError as err:
            line = text_or_obj[: err.start].count(b"\n") + 1
            problems.add(f"line {line}", "is not UTF-8 text")
            return None
    elif isinstance(text_or_obj, str):
        text = text_or_obj
    else:
        problems.add("", f"expected JSON/YAML text or a parsed object, got {type(text_or_obj).__name__}")
        return None
    if not text.strip():
        problems.add("", "is empty; expected the output of kubectl get nodes -o json")
        return None
    refuse_other_format(text, problems.source, "k8s-nodes")  # e.g. an ibnetdiscover dump: one line
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if text.lstrip().startswith(("{", "[")):
            problems.add(f"line {err.lineno}, column {err.colno}", f"is not valid JSON: {err.msg}")
            return None
    except RecursionError:
        problems.add("", "is not valid JSON: nested too deeply")
        return None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problems.add(where, f"is neither JSON nor valid YAML: {err.problem or err.context}")
    except (yaml.YAMLError, ValueError, OverflowError) as err:
        problems.add("", f"is neither JSON nor valid YAML: {err}")
    except RecursionError:
        problems.add("", "is not valid YAML: nested too deeply")
    return None


def _items(doc: Any, problems: Problems) -> list[tuple[Any, str]]:
    if not isinstance(doc, Mapping):
        problems.add("", f"expected a Node list (kubectl get nodes -o json) or one Node, got {_type(doc)}")
        return []
    if "items" in doc:
        items = doc["items"]
        if not isinstance(items, list):
            problems.add("items", f"must be a list of Nodes, got {_type(items)}")
            return []
        return [(item, f"items[{i}]") for i, item in enumerate(items)]
    if doc.get("kind") == "Node":
        return [(doc, "")]
    problems.add("kind", f"expected a List/NodeList with items or a Node, got kind {doc.get('kind')!r}")
    return []


def _node_view(item: Any, path: str, problems: Problems) -> tuple[str | None, Mapping[str, Any]] | None:
    """(metadata.name, labels) of one item, or None after reporting why it is unusable."""
    if not isinstance(item, Mapping):
        problems.add(path, f"expected a Node object, got {_type(item)}")
        return None
    kind = item.get("kind")
    if kind is not None and kind != "Node":
        problems.add(
            _join(path, "kind"), f'expected "Node", got {kind!r}; list nodes only (kubectl get nodes -o json)'
        )
        return None
    meta = item.get("metadata")
    if not isinstance(meta, Mapping):
        problems.add(_join(path, "metadata"), f"must be a mapping with name and labels, got {_type(meta)}")
        return None
    meta_name = meta.get("name")
    if not isinstance(meta_name, str) or not meta_name:
        problems.add(_meta_path(path, "name"), f"must be a non-empty string, got {meta_name!r}")
        meta_name = None
    labels = meta.get("labels", {})
    if labels is None:
        labels = {}
    if not isinstance(labels, Mapping):
        problems.add(
            _meta_path(path, "labels"), f"must be a mapping of label key to value, got {_type(labels)}"
        )
        return None
    return meta_name, labels


def _gpu_count(
    item: Mapping[str, Any], path: str, resource: str, node: str, problems: Problems
) -> tuple[int, str] | None:
    """(count, note for the zero-GPU warning) from allocatable, capacity or the GPU Operator label."""
    status = item.get("status")
    status = status if isinstance(status, Mapping) else {}
    found: dict[str, int] = {}
    for section in ("allocatable", "capacity"):
        table = status.get(section)
        if not isinstance(table, Mapping) or resource not in table:
            continue
        where = f'{_join(path, "status")}.{section}["{resource}"]'
        count = _quantity(table[resource])
        if count is None:
            problems.add(where, f'{table[resource]!r} on node "{node}" is not a whole number of GPUs')
            return None
        found[section] = count
    if "allocatable" in found:
        capacity = found.get("capacity")
        note = f" (capacity {capacity})" if found["allocatable"] == 0 and capacity else ""
        return found["allocatable"], note
    if "capacity" in found:
        return found["capacity"], ""
    meta = item.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if isinstance(labels, Mapping) and _GPU_COUNT_LABEL in labels:
        count = _quantity(labels[_GPU_COUNT_LABEL])
        if count is None:
            problems.add(
                _label_path(path, _GPU_COUNT_LABEL),
                f'{labels[_GPU_COUNT_LABEL]!r} on node "{node}" is not a whole number of GPUs',
            )
            return None
        return count, ""
    return None


def _quantity(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        return int(value.strip())
    return None


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


def _meta_path(path: str, field: str) -> str:
    return f"{_join(path, 'metadata')}.{field}"


def _label_path(path: str, key: str) -> str:
    return f'{_meta_path(path, "labels")}["{key}"]'


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f", ... ({len(names) - _SHOWN} more)" if len(names) > _SHOWN else "")


def _type(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def _stem(source: str) -> str:
    base = Path(source).name
    for suffix in (".json", ".yaml", ".yml"):
        if base.lower().endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return base or "cluster"
