"""A declared schema's integer types accept exactly their ranges, in the generated batch check
(`Schema.batch_checker`, which tests the range by a shift) and in the per-tuple validator
that says what is wrong."""

from __future__ import annotations

import pytest

from riverbed.graph import Schema

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
