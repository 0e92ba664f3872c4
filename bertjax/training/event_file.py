"""TensorBoard event files of scalar summaries, written without TensorFlow.

An event file is a sequence of TFRecords (length, masked CRC-32C of the length, payload,
masked CRC-32C of the payload), each payload one serialized `tensorflow.Event` protocol
buffer. The three messages a scalar log needs (Event, Summary.Value, SessionLog) are encoded
here by field number from TensorBoard's `event.proto` and `summary.proto`, so training logs
to TensorBoard on images that have JAX but no TensorFlow. Records are small (a few hundred
bytes per logged step), so the table-driven CRC costs nothing measurable.
"""

import itertools
import os
import socket
import struct
import time

from bertjax.files import AppendFile, as_path

_FILE_NUMBERS = itertools.count()
_SESSION_START = 1  # SessionLog.SessionStatus.START


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of `data`, as TFRecord framing uses."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(payload: bytes) -> bytes:
    """One TFRecord around `payload`."""
    length = struct.pack("<Q", len(payload))
    return (length + struct.pack("<I", masked_crc(length)) + payload
            + struct.pack("<I", masked_crc(payload)))


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 fields: negative numbers as their two's complement
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_event(wall_time: float, step: int = 0, file_version: str | None = None,
                 scalars: dict[str, float] | None = None,
                 session_start: bool = False) -> bytes:
    """A serialized `Event` with one of: a file version, scalar summaries, a session start."""
    out = _varint(1 << 3 | 1) + struct.pack("<d", wall_time)  # double wall_time = 1
    if step:
        out += _varint(2 << 3) + _varint(step)  # int64 step = 2
    if file_version is not None:
        out += _length_delimited(3, file_version.encode())  # string file_version = 3
    if scalars is not None:
        values = b"".join(  # Summary.value = 1: Value{string tag = 1; float simple_value = 2}
            _length_delimited(1, _length_delimited(1, tag.encode())
                              + _varint(2 << 3 | 5) + struct.pack("<f", float(value)))
            for tag, value in scalars.items())
        out += _length_delimited(5, values)  # Summary summary = 5
    if session_start:
        out += _length_delimited(7, _varint(1 << 3) + _varint(_SESSION_START))  # session_log
    return out


class EventFile:
    """One TensorBoard event file of scalar summaries in `logdir`.

    Names sort in creation order, as TensorBoard reads them: wall-clock second, host, process,
    then a per-process counter. `purge_step` writes a SessionLog START at that step first, on
    which TensorBoard discards the earlier files' events from that step on (a resumed run).
    """

    def __init__(self, logdir: str | os.PathLike, purge_step: int | None = None):
        logdir = as_path(logdir)
        logdir.mkdir(parents=True, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}"
                f".{os.getpid()}.{next(_FILE_NUMBERS):04d}")
        self.path = logdir / name
        self.records = AppendFile(self.path)  # local or object storage (files.AppendFile)
        self._write(encode_event(time.time(), file_version="brain.Event:2"))
        if purge_step is not None:
            self._write(encode_event(time.time(), step=purge_step, session_start=True))

    def _write(self, event: bytes) -> None:
        self.records.write(tfrecord(event))

    def add_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self._write(encode_event(time.time(), step=step, scalars=scalars))

    def flush(self, force: bool = False) -> None:
        """Flush to disk (object storage: see files.AppendFile; `force` uploads now)."""
        self.records.flush(force)

    def close(self) -> None:
        self.records.close()
