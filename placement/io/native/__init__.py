"""The native YAML/JSON formats of cluster, state, job and mapping files, read into domain objects: one module per
file kind (`cluster`, `state`, `job`, `mapping`) over one document reader (`document`).

Every reader collects all problems of a file with field paths (``levels[1].bandwidth_gbps``) before raising.

The key names follow the protobuf messages of ``protos/placement/v1`` (lists of objects, no maps of lists), so
one file is also a valid request body in the protobuf JSON mapping. See ``examples/`` and the README.
"""

from __future__ import annotations

from placement.io.native.cluster import cluster_from_dict, load_cluster
from placement.io.native.document import load_document
from placement.io.native.job import job_from_dict, load_job
from placement.io.native.mapping import load_mapping, mapping_from_obj
from placement.io.native.state import load_state, merge_states, state_from_dict

__all__ = [
    "cluster_from_dict",
    "job_from_dict",
    "load_cluster",
    "load_document",
    "load_job",
    "load_mapping",
    "load_state",
    "mapping_from_obj",
    "merge_states",
    "state_from_dict",
]
