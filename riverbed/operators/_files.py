"""The file adapters of SPL's standard toolkit: FileSource, FileSink and DirectoryScan.

They turn files into streams and back, with SPL's punctuation at file
boundaries: FileSource submits a window mark after each file, so a
``tumbling, punct()`` window downstream sees one file per window, and
FileSink can close a file on each mark (``close_mode="punct"``). For
checkpointed jobs FileSource (``file=`` form) and DirectoryScan are
replayable sources, and FileSink with ``transactional=True`` writes
exactly-once output. Formats: `formats`; each operator: its module.
"""

from ._directory_scan import DirectoryScan, DirectoryScanError
from ._file_sink import FileSink, FileSinkError
from ._file_source import FileSource, FileSourceError, FileSourceOfFile, FileSourceWithInput
from .formats import FileFormatError, parse_timestamp

__all__ = [
    "DirectoryScan",
    "DirectoryScanError",
    "FileFormatError",
    "FileSink",
    "FileSinkError",
    "FileSource",
    "FileSourceError",
    "FileSourceOfFile",
    "FileSourceWithInput",
    "parse_timestamp",
]
