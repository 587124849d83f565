"""The header of a GGUF file for the bench scripts (gguf_q4_0_to_q4_k.py, gguf_mix_q4_k_m.py): its metadata entries
and tensor infos with their byte positions, read from the file's bytes."""
import struct
from typing import NamedTuple

# Byte sizes of the scalar metadata value types (8 = string and 9 = array are walked).
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Entry(NamedTuple):
    key: str
    type: int
    start: int  # the entry's first byte (its key's length)
    value: int  # its value's first byte
    end: int    # one past its last byte


class TensorInfo(NamedTuple):
    name: str
    ne: tuple     # dims, innermost first
    type: int
    offset: int   # from the data section
    type_at: int  # where the type field sits (to relabel in place)


class Header(NamedTuple):
    entries: list
    infos: list
    data: int       # the data section's first byte
    alignment: int


def _string(buf, p):
    n = struct.unpack_from("<Q", buf, p)[0]
    return buf[p + 8:p + 8 + n].decode(), p + 8 + n


def _skip(buf, t, p):
    if t == 8:
        return _string(buf, p)[1]
    if t == 9:
        et, n = struct.unpack_from("<IQ", buf, p)
        p += 12
        for _ in range(n):
            p = _skip(buf, et, p)
        return p
    return p + _SIZES[t]


def read_header(buf):
    _, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    pos, alignment, entries = 24, 32, []
    for _ in range(n_kv):
        start = pos
        key, pos = _string(buf, pos)
        t = struct.unpack_from("<I", buf, pos)[0]
        end = _skip(buf, t, pos + 4)
        entries.append(Entry(key, t, start, pos + 4, end))
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", buf, pos + 4)[0]
        pos = end
    infos = []
    for _ in range(n_tensors):
        name, pos = _string(buf, pos)
        nd = struct.unpack_from("<I", buf, pos)[0]
        ne = struct.unpack_from(f"<{nd}Q", buf, pos + 4)
        type_at = pos + 4 + 8 * nd
        typ, off = struct.unpack_from("<IQ", buf, type_at)
        infos.append(TensorInfo(name, ne, typ, off, type_at))
        pos = type_at + 12
    return Header(entries, infos, pos + (alignment - pos % alignment) % alignment, alignment)
