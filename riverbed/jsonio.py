"""JSON text in, with messages that say what is wrong with it: one parser for every reader
(MQTT payloads, FileSource lines and composite attributes).

orjson is fast but speaks in its own terms: bytes that are not UTF-8 come out as
"str is not valid UTF-8: surrogates not allowed", and an integer beyond 64 bits is read
as a float (2**70 becomes 1.1805916207174113e+21), so an int64 check then reports a
float the user never wrote. `load_json` decodes the text itself first (naming the
offending byte and its offset) and hands a text holding a run of 20 or more digits to
the standard library's parser, which keeps such integers exact for the range check to
report them as written.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["JSONTextError", "load_json"]

_LONG_DIGITS = re.compile(r"\d{20,}")  # 2**64 has 20 digits: orjson would make a float of it


class JSONTextError(ValueError):
    """The data is not JSON text; the message says why and where."""


def load_json(data: bytes | str) -> Any:
    """Parse JSON text (bytes must be UTF-8), keeping integers of any size exact."""
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONTextError(f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset "
                                f"{exc.start} ({exc.reason})") from None
    else:
        text = data
    try:
        if _LONG_DIGITS.search(text):
            return json.loads(text)
        return orjson.loads(text)
    except (orjson.JSONDecodeError, json.JSONDecodeError) as exc:
        raise JSONTextError(f"not JSON: {exc}") from None
    except UnicodeEncodeError as exc:  # a str holding lone surrogates (from surrogateescape)
        raise JSONTextError(f"not UTF-8 text: {exc.reason} at offset {exc.start}") from None
