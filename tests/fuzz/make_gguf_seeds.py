#!/usr/bin/env python3
"""Writes the GGUF fuzz seeds (tests/fuzz/gguf_seeds/): tiny files of every value type and tensor type the reader
handles, a Llama-shaped model with llama and gpt2 tokenizers, v2 and v3, other alignments. Deterministic; stdlib only.
Usage: python3 tests/fuzz/make_gguf_seeds.py [OUT_DIR]"""
import os
import random
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (values per block, bytes per block)
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         12: (256, 144), 13: (256, 176), 14: (256, 210)}


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for it in items:
            out += value(et, it)
        return out
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, version=3, alignment=32, rng=None):
    rng = rng or random.Random(0)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += s(k) + struct.pack("<I", t) + value(t, v)
    data = b""
    infos = b""
    for name, ne, typ in tensors:
        per, size = BLOCK[typ]
        n = 1
        for d in ne:
            n *= d
        nbytes = n // per * size
        while len(data) % alignment:
            data += b"\0"
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", typ, len(data))
        if typ in (0,):
            data += b"".join(struct.pack("<f", rng.uniform(-1, 1)) for _ in range(n))
        else:
            data += bytes(rng.getrandbits(8) for _ in range(nbytes))
    out = head + infos
    while len(out) % alignment:
        out += b"\0"
    return out + data


def llama(tok_model="llama", version=3, alignment=32, qtype=8, tied=True):
    h, f, v = 32, 64, 16 + 256 * (tok_model == "llama")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] if tok_model == "llama" else []
    tokens += ["\u2581a", "b", "ab", "\u2581ab", "c", "d", "cd", "e", "f", "g", "h", "i", "j", "k", "l", "m"]
    tokens = tokens[:v] if tok_model == "llama" else tokens[:16]
    v = len(tokens)
    types = [2, 3, 3] + [6] * 256 + [1] * 16 if tok_model == "llama" else [1] * v
    kvs = [("general.architecture", STR, "llama"), ("general.name", STR, "seed"), ("general.alignment", U32, alignment),
           ("llama.context_length", U32, 256), ("llama.embedding_length", U32, h), ("llama.block_count", U32, 1),
           ("llama.feed_forward_length", U32, f), ("llama.attention.head_count", U32, 2),
           ("llama.attention.head_count_kv", U32, 1), ("llama.rope.freq_base", F32, 10000.0),
           ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5), ("llama.vocab_size", U32, v),
           ("llama.rope.dimension_count", U32, 16), ("tokenizer.ggml.model", STR, tok_model),
           ("tokenizer.ggml.tokens", ARR, (STR, tokens)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
           ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
           ("tokenizer.ggml.add_bos_token", BOOL, 1),
           ("tokenizer.chat_template", STR, "{% for m in messages %}{{ m['content'] }}{% endfor %}")]
    if tok_model == "llama":
        kvs.append(("tokenizer.ggml.scores", ARR, (F32, [-1000.0] * v)))
    else:
        kvs.append(("tokenizer.ggml.pre", STR, "llama-bpe"))
        kvs.append(("tokenizer.ggml.merges", ARR, (STR, ["a b", "c d"])))
    tensors = [("token_embd.weight", [h, v], qtype), ("blk.0.attn_norm.weight", [h], 0),
               ("blk.0.attn_q.weight", [h, h], qtype), ("blk.0.attn_k.weight", [h, 16], qtype),
               ("blk.0.attn_v.weight", [h, 16], 2), ("blk.0.attn_output.weight", [h, h], 6),
               ("blk.0.ffn_norm.weight", [h], 0), ("blk.0.ffn_gate.weight", [h, f], 3),
               ("blk.0.ffn_up.weight", [h, f], 7), ("blk.0.ffn_down.weight", [f, h], 1),
               ("output_norm.weight", [h], 0)]
    if not tied:
        tensors.append(("output.weight", [h, v], 30))
    return gguf(kvs, tensors, version, alignment)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "gguf_seeds")
    os.makedirs(out, exist_ok=True)
    seeds = {
        "llama_spm_q8.gguf": llama(),
        "llama_bpe_v2_untied.gguf": llama("gpt2", version=2, tied=False),
        "llama_align64_q4.gguf": llama(alignment=64, qtype=2),
        "kquants.gguf": gguf([("general.architecture", STR, "llama")],
                             [("q4k", [256, 2], 12), ("q5k", [256, 1], 13), ("q6k", [256, 1], 14), ("q51", [64, 1], 7)]),
        "every_value_type.gguf": gguf([("u8", U8, 7), ("i8", I8, -7), ("u16", U16, 7), ("i16", I16, -7), ("u32", U32, 7),
                                       ("i32", I32, -7), ("f32", F32, 0.5), ("b", BOOL, 1), ("s", STR, "x"),
                                       ("u64", U64, 7), ("i64", I64, -7), ("f64", F64, 0.5),
                                       ("nested", ARR, (ARR, [(I32, [1, 2]), (STR, ["a", "b"]), (ARR, [(U8, [1])])]))],
                                      []),
        "empty.gguf": gguf([], []),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
    print(f"{len(seeds)} seeds in {out}: " + ", ".join(f"{k} ({len(v)} B)" for k, v in seeds.items()))


if __name__ == "__main__":
    main()
