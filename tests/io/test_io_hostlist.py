"""Tests of placement.io.hostlist: Slurm hostlist expansion, compression and their error messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.hostlist import MAX_HOSTS, compress_hostlist, expand_hostlist


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node1", ["node1"]),
        ("dev[0-5]", ["dev0", "dev1", "dev2", "dev3", "dev4", "dev5"]),
        ("node[001-003,020]", ["node001", "node002", "node003", "node020"]),
        ("switch.2.[1-3]", ["switch.2.1", "switch.2.2", "switch.2.3"]),
        ("a[1-2],b3", ["a1", "a2", "b3"]),
        ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
        ("n[8-10]", ["n8", "n9", "n10"]),  # width of the low bound: no padding
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[3,1,2]", ["n3", "n1", "n2"]),  # written order is kept
        ("s[0-2],s0", ["s0", "s1", "s2", "s0"]),  # duplicates are kept too
        (" a1 , b2 ", ["a1", "b2"]),
        ("[1-2]x", ["1x", "2x"]),
    ],
)
def test_expand(expr: str, names: list[str]) -> None:
    assert expand_hostlist(expr) == names


def test_expand_keeps_zero_padding_over_a_long_range() -> None:
    names = expand_hostlist("node[001-016,020]")
    assert len(names) == 17
    assert names[0] == "node001" and names[15] == "node016" and names[16] == "node020"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (
            "node[5-3]",
            'hostlist "node[5-3]": range "5-3" at character 6 runs backwards; write the lower '
            'bound first ("3-5")',
        ),
        ("node[1-3", 'hostlist "node[1-3": "[" at character 5 is never closed with "]"'),
        ("node1-3]", 'hostlist "node1-3]": "]" at character 8 has no matching "["'),
        ("a[[1]]", 'hostlist "a[[1]]": nested "[" at character 3; brackets do not nest'),
        ("", 'hostlist "": is empty; give at least one name'),
        ("  ", 'hostlist "  ": is empty; give at least one name'),
        ("a,,b", 'hostlist "a,,b": empty name at character 3; remove the extra comma'),
        ("a,", 'hostlist "a,": empty name after the last comma; remove the extra comma'),
        ("node[]", 'hostlist "node[]": empty brackets "[]" at character 5; put numbers or ranges inside'),
        ("n[a-c]", 'hostlist "n[a-c]": "a-c" at character 3 is not a number or a low-high range of numbers'),
        ("n[1-]", 'hostlist "n[1-]": "1-" at character 3 is not a number or a low-high range of numbers'),
        ("n[1,,2]", 'hostlist "n[1,,2]": empty entry inside brackets at character 5'),
        ("a b", 'hostlist "a b": whitespace inside a name at character 2; separate names with commas'),
    ],
)
def test_expand_errors_name_the_value_and_the_rule(expr: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        expand_hostlist(expr, source="topology.conf", path="line 3, column 21")
    assert info.value.source == "topology.conf"
    assert [(p.path, p.message) for p in info.value.problems] == [("line 3, column 21", message)]
    assert str(info.value) == f"topology.conf: line 3, column 21: {message}"


def test_expand_refuses_huge_expressions() -> None:
    with pytest.raises(InputError, match=f"more than {MAX_HOSTS}"):
        expand_hostlist("n[0-99999999]")
    with pytest.raises(InputError, match=f"more than {MAX_HOSTS}"):
        expand_hostlist("a[0-9999]b[0-9999]")


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["node01", "node02", "node03", "node07", "login1"], "node[01-03,07],login1"),
        (["switch.1.9", "switch.1.10", "switch.1.11"], "switch.1.[9-11]"),
        (["n08", "n09", "n10"], "n[08-10]"),
        (["n9", "n10"], "n[9-10]"),
        (["n1", "n01"], "n[1,01]"),
        (["node5"], "node5"),
        (["gpu-a", "gpu-b"], "gpu-a,gpu-b"),
        (["rack11", "rack12", "rack21", "rack22"], "rack[11-12,21-22]"),
        ([], ""),
    ],
)
def test_compress(names: list[str], expr: str) -> None:
    assert compress_hostlist(names) == expr
    if names:
        assert expand_hostlist(expr) == names


def test_compress_sort() -> None:
    assert compress_hostlist(["n3", "n1", "m1", "n2"], sort=True) == "m1,n[1-3]"
    assert compress_hostlist(["n3", "n1", "n2"]) == "n[3,1-2]"


@pytest.mark.parametrize("bad", ["", "a,b", "a[1]", "a b"])
def test_compress_rejects_names_a_hostlist_cannot_hold(bad: str) -> None:
    with pytest.raises(ValueError, match="cannot write"):
        compress_hostlist(["ok1", bad])


_name = st.builds(
    lambda prefix, number, width: prefix + ("" if number is None else str(number).zfill(width)),
    st.text(alphabet="abxyz.-_", max_size=4),
    st.one_of(st.none(), st.integers(min_value=0, max_value=120)),
    st.integers(min_value=0, max_value=3),
).filter(bool)


@given(st.lists(_name, min_size=1, max_size=40))
def test_compress_then_expand_is_the_identity(names: list[str]) -> None:
    assert expand_hostlist(compress_hostlist(names)) == names
    assert sorted(expand_hostlist(compress_hostlist(names, sort=True))) == sorted(names)


@given(st.text(alphabet="ab01-[],. ", max_size=20))
def test_expand_never_leaks_a_raw_exception(expr: str) -> None:
    try:
        names = expand_hostlist(expr)
    except InputError as err:
        assert len(err.problems) == 1
    else:
        assert names and all(names)
