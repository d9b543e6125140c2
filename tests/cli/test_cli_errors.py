"""Clean input errors of placement.cli.app: a bad cluster, state, job, mapping or file gives exit code 2 with the
message verbatim on stderr and no traceback."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support_cli import assert_input_error, run, write


def test_cluster_errors_verbatim(tmp_path: Path, example: tuple[Path, Path]) -> None:
    _, job = example
    mapping = write(tmp_path, "m.json", "[]")
    fan = write(
        tmp_path,
        "fan.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 450}, {name: leaf, bandwidth_gbps: 50}, {name: spine, bandwidth_gbps: 25}]
        generate: {nodes: 4, devices: 8, fanout: {leaf: 0}}
    """,
    )
    assert_input_error(
        run("evaluate", fan, job, mapping), f"{fan}: generate.fanout.leaf: must be >= 1, got 0"
    )
    neg = write(
        tmp_path,
        "neg.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 450}, {name: leaf, bandwidth_gbps: -50}]
        hosts: [{name: a, devices: 8}]
    """,
    )
    assert_input_error(
        run("evaluate", neg, job, mapping), f"{neg}: levels[1].bandwidth_gbps: must be > 0, got -50"
    )
    twice = write(
        tmp_path,
        "twice.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 450}, {name: leaf, bandwidth_gbps: 50}]
        hosts: [{name: gpu-a, devices: 8}, {name: gpu-a, devices: 8}]
    """,
    )
    assert_input_error(
        run("place", twice, job), f"{twice}: hosts[1].name: host 'gpu-a' is listed twice (first at hosts[0])"
    )
    several = write(
        tmp_path,
        "several.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 0}, {name: leaf, bandwidth_gbps: -50}]
        generate: {nodes: 4, devices: 8, fanout: {leaf: 0}}
    """,
    )
    assert_input_error(
        run("place", several, job),
        f"{several}: 3 error(s)\n"
        "  - levels[0].bandwidth_gbps: must be > 0, got 0\n"
        "  - levels[1].bandwidth_gbps: must be > 0, got -50\n"
        "  - generate.fanout.leaf: must be >= 1, got 0",
    )


def test_state_error_verbatim(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    state = write(
        tmp_path, "s.yaml", "occupied: [{job: a, devices: [node01]}, {job: b, devices: [node01/gpu2]}]\n"
    )
    mapping = write(tmp_path, "m.json", "[]")
    assert_input_error(
        run("evaluate", cluster, job, mapping, "--state", state),
        f"{state}: occupied[1].devices[0]: node01/gpu2 is already occupied by job 'a'",
    )


def test_job_errors_verbatim(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, _ = example
    ranks = write(
        tmp_path,
        "ranks.yaml",
        """\
        ranks: 16
        parallel: {tp: 8, dp: 4}
        model: {parameters: 7e9, hidden: 4096, layers: 32, seq_len: 4096}
    """,
    )
    assert_input_error(
        run("place", cluster, ranks), f"{ranks}: ranks: 16 does not equal tp*cp*ep*dp*pp = 8*1*1*4*1 = 32"
    )
    order = write(
        tmp_path,
        "order.yaml",
        """\
        parallel: {tp: 8, dp: 4, order: tp-cp-dp-pp}
        model: {parameters: 7e9, hidden: 4096, layers: 32, seq_len: 4096}
    """,
    )
    assert_input_error(
        run("place", cluster, order),
        f"{order}: parallel.order: 'tp-cp-dp-pp' misses ep; it must name each of tp, cp, ep, dp, pp "
        "once, e.g. 'tp-cp-ep-dp-pp'",
    )


def test_mapping_error_verbatim(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    mapping = write(tmp_path, "m.json", json.dumps({"mapping": ["node01/gpu0", "node09/gpu0"]}))
    assert_input_error(
        run("evaluate", cluster, job, mapping),
        f"{mapping}: mapping[1]: unknown device 'node09/gpu0'; devices are named host/gpuK, e.g. node01/gpu0",
    )


def test_missing_and_malformed_files(tmp_path: Path, example: tuple[Path, Path]) -> None:
    _, job = example
    assert_input_error(
        run("place", tmp_path / "no.yaml", job),
        f"{tmp_path / 'no.yaml'}: cannot read the file: No such file or directory",
    )
    broken = write(tmp_path, "broken.yaml", "levels: [\n")
    res = run("place", broken, job)
    assert (
        res.exit_code == 2
        and res.stderr.startswith(f"error: {broken}: line ")
        and "invalid YAML" in res.stderr
    )
    assert "Traceback" not in res.output
