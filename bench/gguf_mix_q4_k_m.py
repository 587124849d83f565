#!/usr/bin/env python3
"""Writes a Q4_K_M-like GGUF from a random one of ../shared/tools/make_random_gguf.py (any --dtype), for speed
figures: the same metadata and shapes, each 2-D tensor whose rows are a multiple of 256 re-encoded as llama.cpp's
quantizer types it for LLAMA_FTYPE_MOSTLY_Q4_K_M (llama_tensor_get_type): the output / tied token_embd Q6_K,
attn_v and ffn_down Q6_K in the layers use_more_bits picks (i < n/8, i >= 7n/8, (i - n/8) % 3 == 2) and Q4_K
elsewhere, every other matrix Q4_K; 1-D tensors (norms) copied. The blocks are random but decode sensibly:
Q4_K random codes, 6-bit scales and mins with d, dmin ~ 0.002, 0.001 (as bench/gguf_q4_0_to_q4_k.py); Q6_K random
ql/qh, int8 sub-block scales uniform in [-32, 32], d = 6.2e-5 (the smallest normal f16 is 6.1e-5), so weights
have an rms of about 0.02. general.file_type is set to 15 (MOSTLY_Q4_K_M). The mode q5_k_m writes the Q5_K_M mix
instead (the same choice of Q6_K tensors, Q5_K for the rest, d and dmin halved for the 5-bit codes; file_type 17).
Usage: /usr/bin/python3 bench/gguf_mix_q4_k_m.py IN.gguf OUT.gguf [q6_k|q5_k_m]   (needs numpy; q6_k: every
matrix Q6_K)"""
import re
import struct
import sys

import numpy as np

from gguf_header import read_header

Q4_K, Q5_K, Q6_K = 12, 13, 14
BLOCK = {Q4_K: 144, Q5_K: 176, Q6_K: 210}
TYPE_SIZE = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 12: (256, 144), 13: (256, 176),
             14: (256, 210)}


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def block_pool(typ, rng, n=1 << 16):
    b = rng.integers(0, 256, size=(n, BLOCK[typ]), dtype=np.uint8)
    if typ in (Q4_K, Q5_K):
        scale = 1.0 if typ == Q4_K else 0.5
        b[:, 0:2] = (rng.uniform(0.5, 1.5, n) * 0.002 * scale).astype("<f2").view(np.uint8).reshape(n, 2)
        b[:, 2:4] = (rng.uniform(0.5, 1.5, n) * 0.001 * scale).astype("<f2").view(np.uint8).reshape(n, 2)
    else:
        b[:, 192:208] = rng.integers(-32, 33, size=(n, 16), dtype=np.int8).view(np.uint8)
        b[:, 208:210] = np.full(n, 6.2e-5, dtype="<f2").view(np.uint8).reshape(n, 2)
    return b


def main(src, dst, only=None):
    base, file_type = (Q5_K, 17) if only == "q5_k_m" else (Q4_K, 15)
    buf = open(src, "rb").read()
    h = read_header(buf)
    alignment, data = h.alignment, h.data
    kv = bytearray(buf[:24])
    n_layers = 0
    for e in h.entries:
        if e.key.endswith(".block_count"):
            n_layers = struct.unpack_from("<I", buf, e.value)[0]
        entry = bytearray(buf[e.start:e.end])
        if e.key == "general.file_type" and e.type in (4, 5):
            entry[-4:] = struct.pack("<I", file_type)
        kv += entry
    infos = [(t.name, t.ne, t.type, t.offset) for t in h.infos]
    has_output = any(n == "output.weight" for n, *_ in infos)
    out_infos, placed, offset = [], [], 0
    counts = {}
    for name, ne, typ, off in infos:
        new = typ
        if len(ne) == 2 and ne[0] % 256 == 0:
            m = re.match(r"blk\.(\d+)\.(attn_v|ffn_down)\.weight$", name)
            if only == "q6_k":
                new = Q6_K
            elif name == "output.weight" or (name == "token_embd.weight" and not has_output):
                new = Q6_K
            elif m and use_more_bits(int(m.group(1)), n_layers):
                new = Q6_K
            else:
                new = base
        qk, ts = TYPE_SIZE[new]
        nbytes = int(np.prod(ne)) // qk * ts
        out_infos.append((name, ne, new, offset))
        placed.append((typ, off, new, nbytes, ne))
        counts[new] = counts.get(new, 0) + 1
        offset += nbytes + (alignment - nbytes % alignment) % alignment
    head = bytearray(kv)
    for name, ne, typ, off in out_infos:
        nb = name.encode()
        head += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        head += struct.pack("<IQ", typ, off)
    head += b"\0" * ((alignment - len(head) % alignment) % alignment)
    rng = np.random.default_rng(0)
    pools = {t: block_pool(t, rng) for t in (base, Q6_K)}
    with open(dst, "wb") as f:
        f.write(head)
        for (typ, off, new, nbytes, ne), (_, _, _, noff) in zip(placed, out_infos):
            assert f.tell() == len(head) + noff
            if new == typ:
                f.write(buf[data + off:data + off + nbytes])
            else:
                pool = pools[new]
                nblocks = nbytes // BLOCK[new]
                done = 0
                while done < nblocks:
                    take = min(len(pool), nblocks - done)
                    start = int(rng.integers(0, len(pool) - take + 1))
                    f.write(pool[start:start + take].tobytes())
                    done += take
            f.write(b"\0" * ((alignment - nbytes % alignment) % alignment))
    names = {0: "F32", 1: "F16", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 2: "Q4_0", 8: "Q8_0", 30: "BF16"}
    print(f"{dst}: " + ", ".join(f"{c} {names.get(t, t)}" for t, c in sorted(counts.items())))


if __name__ == "__main__":
    main(*sys.argv[1:4])
