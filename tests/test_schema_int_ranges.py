"""A declared schema's integer types accept exactly their ranges, in the generated batch check
(`Schema.batch_checker`, which tests the range by a shift) and in the per-tuple validator
that says what is wrong."""

from __future__ import annotations

import pytest

from riverbed.graph import Schema, SchemaError

RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
          "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
          "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
          "uint64": (0, 2**64 - 1)}


@pytest.mark.parametrize("spl_type", sorted(RANGES))
def test_an_integer_attribute_is_valid_exactly_within_its_range(spl_type: str) -> None:
    lo, hi = RANGES[spl_type]
    schema = Schema(a=spl_type, b="float64")
    first_invalid, why = schema.batch_checker(), schema.validator()
    for v in (lo, hi, 0, hi // 2, lo // 2, lo - 1, hi + 1, lo * 2 - 1, hi * 2 + 1, -(2**200), 2**200, -1):
        ok = lo <= v <= hi
        batch = [{"a": 0, "b": 1.0}, {"a": v, "b": 1.0}]
        assert first_invalid(batch) == (-1 if ok else 1), (spl_type, v)
        assert (why(batch[1]) is None) == ok, (spl_type, v)
    assert first_invalid([{"a": True, "b": 1.0}]) == 0  # a bool is not an integer attribute


def test_the_batch_check_names_the_first_invalid_tuple_by_position() -> None:
    """The failing tuple's index is found after the loop, by identity: an equal but valid tuple
    before it (1 == 1.0, so {"a": 1} == {"a": 1.0}), a missing attribute, an empty batch."""
    first_invalid = Schema(a="int64", b="float64").batch_checker()
    good = {"a": 1, "b": 2.0}
    assert first_invalid([]) == -1
    assert first_invalid([good, good, good]) == -1
    assert first_invalid([good, {"a": 1, "b": 2.0}, {"a": 1.0, "b": 2.0}, good]) == 2
    assert first_invalid([good, good, {"a": 1}, good]) == 2
    assert first_invalid([good, {"a": 1, "c": 2.0}]) == 1  # a KeyError inside the loop
    assert first_invalid([good, [1, 2.0]]) == 1
    bad = {"a": "x", "b": 2.0}
    assert first_invalid([good, bad, good, bad]) == 1


@pytest.mark.parametrize(("types", "message"), [
    ({"temp": "float"}, "attribute 'temp': unknown type 'float'"),
    ({"a": "int64", "b": "list<floatt>"}, "attribute 'b': unknown type 'floatt'"),
])
def test_an_unknown_type_names_its_attribute(types: dict[str, str], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        Schema(types)
