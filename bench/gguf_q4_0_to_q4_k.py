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

from gguf_header import read_header


def main(src, dst):
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        buf = f.read()
        mm = np.memmap(dst, dtype=np.uint8, mode="r+")
        h = read_header(buf)
        data = h.data
        changed = 0
        rng = np.random.default_rng(0)
        for name, ne, typ, off, type_at in h.infos:
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
