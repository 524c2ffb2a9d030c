"""Capture files (docs/capture.md): the framing, the writer, the digests, the reader."""
from zfsobs.capture.format import (FILE_MAGIC, FORMAT_NAME, FORMAT_VERSION, MAX_PAYLOAD, MAX_RECORD,  # noqa: F401
                                   RECORD_MAGIC, _FILE_HEAD, _REC_HEAD)
from zfsobs.capture.reader import Capture, read_capture  # noqa: F401
from zfsobs.capture.writer import FLUSH_BYTES, FLUSH_SECONDS, CaptureWriter  # noqa: F401
