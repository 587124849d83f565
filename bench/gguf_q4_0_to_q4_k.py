#!/usr/bin/env python3
"""Turns a random Q4_0 GGUF from ../shared/tools/make_random_gguf.py into a Q4_K one of the same shape, for speed
figures (random weights: the values do not matter, the bytes moved do). Q4_0 (18 bytes per 32 values) and Q4_K
(144 bytes per 256) have the same size, so every Q4_0 matrix whose rows are a multiple of 256 is relabelled Q4_K in
place and each super-block's d and dmin are set to sane f16 values (the scales and codes stay random).
Usage: /usr/bin/python3 bench/gguf_q4_0_to_q4_k.py IN.gguf OUT.gguf   (needs numpy)"""
import shutil
import struct
import sys

import numpy as np


def main(src, dst):
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        buf = f.read()
        mm = np.memmap(dst, dtype=np.uint8, mode="r+")
        pos = 4
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, pos)
        pos += 20
        alignment = 32

        def string(p):
            n = struct.unpack_from("<Q", buf, p)[0]
            return buf[p + 8:p + 8 + n].decode(), p + 8 + n

        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def skip(t, p):
            if t == 8:
                return string(p)[1]
            if t == 9:
                et, n = struct.unpack_from("<IQ", buf, p)
                p += 12
                for _ in range(n):
                    p = skip(et, p)
                return p
            return p + sizes[t]

        for _ in range(n_kv):
            key, pos = string(pos)
            t = struct.unpack_from("<I", buf, pos)[0]
            if key == "general.alignment":
                alignment = struct.unpack_from("<I", buf, pos + 4)[0]
            pos = skip(t, pos + 4)
        infos = []
        for _ in range(n_tensors):
            name, pos = string(pos)
            nd = struct.unpack_from("<I", buf, pos)[0]
            ne = struct.unpack_from(f"<{nd}Q", buf, pos + 4)
            type_at = pos + 4 + 8 * nd
            typ, off = struct.unpack_from("<IQ", buf, type_at)
            infos.append((name, ne, typ, off, type_at))
            pos = type_at + 12
        data = pos + (alignment - pos % alignment) % alignment
        changed = 0
        rng = np.random.default_rng(0)
        for name, ne, typ, off, type_at in infos:
            if typ != 2 or ne[0] % 256:
                continue
            mm[type_at:type_at + 4] = np.frombuffer(struct.pack("<I", 12), np.uint8)
            n = int(np.prod(ne)) // 256
            blocks = mm[data + off:data + off + n * 144].reshape(n, 144)
            d = (rng.uniform(0.5, 1.5, n) * 0.002).astype(np.float16).view(np.uint8).reshape(n, 2)
            dmin = (rng.uniform(0.5, 1.5, n) * 0.001).astype(np.float16).view(np.uint8).reshape(n, 2)
            blocks[:, 0:2] = d
            blocks[:, 2:4] = dmin
            changed += 1
        mm.flush()
        # general.file_type stays as written; tools read the tensor types.
        print(f"{dst}: {changed} tensors relabelled Q4_0 -> Q4_K")


if __name__ == "__main__":
    main(*sys.argv[1:3])
