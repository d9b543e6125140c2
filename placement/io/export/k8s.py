"""Kubernetes manifests: a Kueue `Topology` whose levels are node-label keys (coarse to fine, kubernetes.io/hostname
last), a headless Service for the rendezvous, and one Pod per rank pinned to its node with its rank environment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from placement.io.export.common import ExportOptions, is_amd, refuse
from placement.io.export.document import Seat
from placement.model.topology import Topology

__all__ = ["HOSTNAME_LABEL", "k8s_manifests", "kueue_topology"]

HOSTNAME_LABEL = "kubernetes.io/hostname"
# a qualified label key: optional DNS-subdomain prefix and "/", then a name of <= 63 characters
_LABEL_KEY_RE = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
)


def _slug(name: str, limit: int = 40) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:limit].strip("-")
    return s or "job"


def kueue_topology(topology: Topology, opts: ExportOptions) -> dict[str, Any]:
    """The Kueue `Topology` (kueue.x-k8s.io/v1beta1): one level per cluster level, coarse to fine, each a node-label
    key: the host level is kubernetes.io/hostname, the others come from `opts.level_labels` (or are keys already)."""
    keys: list[str] = []
    missing: list[str] = []
    for li, lv in enumerate(topology.levels):
        key = HOSTNAME_LABEL if li == 0 else opts.level_labels.get(lv.name, lv.name if "/" in lv.name else "")
        if li > 0 and not key:
            missing.append(lv.name)
        elif not _LABEL_KEY_RE.fullmatch(key):
            raise refuse("k8s", f"level {lv.name!r}: {key!r} is not a node-label key", "--label")
        keys.append(key)
    if missing:
        raise refuse(
            "k8s",
            f"levels {missing} need the node-label key that holds them on each node: give "
            + " ".join(f"--label {m}=KEY" for m in missing)
            + " (e.g. cloud.provider.com/topology-rack)",
            "--label",
        )
    if len(set(keys)) != len(keys):
        raise refuse("k8s", f"two levels map to the same node label: {keys}", "--label")
    if len(keys) > 8:
        raise refuse("k8s", f"Kueue allows at most 8 topology levels, the cluster has {len(keys)}", "--label")
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Topology",
        "metadata": {"name": _slug(topology.name, 63)},
        "spec": {"levels": [{"nodeLabel": k} for k in reversed(keys)]},
    }


def _pod(seat: Seat, seats: Sequence[Seat], opts: ExportOptions, job: str) -> dict[str, Any]:
    name = f"{job}-rank-{seat.rank}"
    env = [
        {"name": "MASTER_ADDR", "value": f"{job}-rank-0.{job}"},
        {"name": "MASTER_PORT", "value": str(opts.master_port)},
        {"name": "WORLD_SIZE", "value": str(len(seats))},
        {"name": "RANK", "value": str(seat.rank)},
        {"name": "LOCAL_RANK", "value": "0"},
        {"name": "PLACEMENT_DEVICE", "value": seat.device},
    ]
    resource = opts.gpu_resource or ("amd.com/gpu" if is_amd(seat.kind) else "nvidia.com/gpu")
    container: dict[str, Any] = {"name": "rank", "image": opts.image}
    if opts.command:
        container["command"] = list(opts.command)
    container["env"] = env
    container["resources"] = {"limits": {resource: 1}}
    if seat.rank == 0:
        container["ports"] = [{"name": "rendezvous", "containerPort": opts.master_port}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"placement/job": job, "placement/rank": str(seat.rank)},
            "annotations": {"placement/device": seat.device},
        },
        "spec": {
            "restartPolicy": "Never",
            "hostname": name,
            "subdomain": job,
            "nodeSelector": {HOSTNAME_LABEL: seat.host},
            "containers": [container],
        },
    }


def k8s_manifests(seats: Sequence[Seat], opts: ExportOptions, topology: Topology | None) -> str:
    """Multi-document YAML for ``kubectl apply -f``: the Kueue Topology (with the cluster), the Service, the Pods.

    Each Pod asks for one GPU of its node; which one the kubelet's device plugin picks is not in the Pod's hands,
    so the planned GPU is recorded (annotation placement/device) rather than enforced.
    """
    if not opts.image:
        raise refuse("k8s", "--image is required (the container image each rank Pod runs)", "--image")
    job = _slug(opts.job)
    docs: list[dict[str, Any]] = []
    if topology is not None:
        docs.append(kueue_topology(topology, opts))
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": job, "labels": {"placement/job": job}},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"placement/job": job},
                "ports": [{"name": "rendezvous", "port": opts.master_port}],
            },
        }
    )
    docs += [_pod(s, seats, opts, job) for s in seats]
    head = (
        f"# Kubernetes manifests of job {opts.job}: {len(seats)} rank Pods pinned with {HOSTNAME_LABEL}, a headless\n"
        "# Service for MASTER_ADDR"
        + (
            ", and the Kueue Topology (levels = node-label keys)"
            if topology is not None
            else " (pass --cluster for the Kueue Topology)"
        )
        + ".\n"
        "# The device plugin picks which GPU of the node a Pod gets; the planned one is annotated placement/device.\n"
    )
    return head + yaml.safe_dump_all(docs, sort_keys=False)
