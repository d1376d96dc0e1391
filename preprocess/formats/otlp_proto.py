"""OTLP protobuf files -> the OTLP/JSON dictionaries ``preprocess.formats.otlp`` reads.

Decoding uses the ``opentelemetry-proto`` package's generated messages. A file holds one or
more export requests, framed as the Collector's file exporter writes them (a 4-byte
big-endian length before each message), as ``writeDelimitedTo`` does (a varint length), or
as one bare message. Which request type a message is (traces, metrics, logs) is not in the
bytes: each type is tried and the one that knows every field of the message wins.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from preprocess.formats.sources import IssueLog

log = logging.getLogger(__name__)

_REQUEST_TYPES: tuple[type[Message], ...] = (ExportTraceServiceRequest, ExportMetricsServiceRequest,
                                             ExportLogsServiceRequest)
_FIELD_ONE_LEN = 0x0A  # every request's only field: 1, length-delimited


def _fixed_frames(data: bytes) -> list[bytes] | None:
    frames, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            return None
        size = int.from_bytes(data[pos:pos + 4], "big")
        pos += 4
        if pos + size > len(data):
            return None
        frames.append(data[pos:pos + size])
        pos += size
    return frames


def _varint_frames(data: bytes) -> list[bytes] | None:
    frames, pos = [], 0
    while pos < len(data):
        size = shift = 0
        while True:
            if pos >= len(data) or shift > 63:
                return None
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if pos + size > len(data):
            return None
        frames.append(data[pos:pos + size])
        pos += size
    return frames


def split_frames(data: bytes) -> tuple[str, list[bytes]]:
    """The messages of a file and the framing found: ``fixed32``, ``varint`` or ``single``."""
    for framing, split in (("fixed32", _fixed_frames), ("varint", _varint_frames)):
        frames = split(data)
        # A frame of a request starts with field 1; this keeps a bare message from reading as framed.
        if frames and all(not f or f[0] == _FIELD_ONE_LEN for f in frames):
            return framing, frames
    return "single", [data]


def decode(frame: bytes) -> Message | None:
    """The request type that reads ``frame`` with no unknown field (else the one that knows the most)."""
    best: tuple[int, Message] | None = None
    for request_type in _REQUEST_TYPES:
        message = request_type()
        try:
            message.ParseFromString(frame)
        except DecodeError:
            continue
        message.DiscardUnknownFields()
        known = message.ByteSize()
        if known == len(frame):
            return message
        if known and (best is None or known > best[0]):
            best = (known, message)
    return None if best is None else best[1]


def requests(path: Path, data: bytes, *, issues: IssueLog) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(message number, request as OTLP/JSON dict)``; ids come out base64, which the JSON reader accepts."""
    framing, frames = split_frames(data)
    log.debug("%s: %d OTLP protobuf message(s), %s framing", path, len(frames), framing)
    for number, frame in enumerate(frames, start=1):
        message = decode(frame)
        if message is None:
            issues.add(path, f"protobuf message {number} ({len(frame)} bytes, {framing} framing) is not an OTLP "
                       "export request", where=f"message[{number}]")
            continue
        yield number, json_format.MessageToDict(message, use_integers_for_enums=True)
