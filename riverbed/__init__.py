"""riverbed: IBM Streams' window semantics on a Python stream runtime."""

__version__ = "0.1.0"
