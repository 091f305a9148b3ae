"""JSON text readers say what is wrong in the user's terms (issue 16.12): the offending byte
of text that is not UTF-8, and an out-of-range integer as written, not as a float."""

from __future__ import annotations

import pytest

from riverbed.graph import Schema
from riverbed.jsonio import JSONTextError, load_json
from riverbed.mqtt._codec import Codec
from riverbed.operators.formats import RecordError, json_record_parser


def test_bytes_that_are_not_utf8_are_named_with_their_offset() -> None:
    with pytest.raises(JSONTextError, match=r"not UTF-8 text: byte 0xff at offset 9 \(invalid start byte\)"):
        load_json(b'{"name": \xff\xfe}')


def test_integers_beyond_64_bits_stay_exact() -> None:
    assert load_json(b'{"n": 1180591620717411303424}') == {"n": 2 ** 70}
    assert load_json('[18446744073709551616, 1.5, "12345678901234567890123"]') == [
        2 ** 64, 1.5, "12345678901234567890123"]
    assert load_json(b'{"n": 12}') == {"n": 12}


def test_not_json_says_so() -> None:
    with pytest.raises(JSONTextError, match="not JSON"):
        load_json("{nope")


def test_an_mqtt_payload_that_is_not_utf8_is_refused_naming_the_byte() -> None:
    codec = Codec("json", Schema(name="rstring"))
    good, bad = codec.decode(b'{"name": "\xff\xfe"}')
    assert good == []
    assert bad[0].reason == "undecodable json: not UTF-8 text: byte 0xff at offset 10 (invalid start byte)"


def test_an_int64_out_of_range_is_reported_as_written() -> None:
    schema = Schema(n="int64")
    good, _ = Codec("json", schema).decode(b'{"n": 1180591620717411303424}')
    # The source's declared schema, checked at submit, then reports the integer as written.
    assert schema.validator()(good[0]) == "attribute 'n' = 1180591620717411303424 is not a valid int64"
    parse = json_record_parser(Schema(n="int64"), ("n",), None)
    with pytest.raises(RecordError, match=r"attribute .n.: 1180591620717411303424 is out of the "
                                          r"range of int64 \[-9223372036854775808, 9223372036854775807\]"):
        parse('{"n": 1180591620717411303424}')
