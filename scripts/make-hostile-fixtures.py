#!/usr/bin/env python3
"""Write fixtures/hostile/: malformed GGUF files and corpora, each with the
error toy must give (exit code 2, one line containing the expected text).
The list with expectations is fixtures/hostile/expected.tsv; the test
toy-cli/tests/hostile.rs runs every entry. Regenerate with:
    python3 scripts/make-hostile-fixtures.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "hostile")


def s(x: bytes) -> bytes:
    return struct.pack("<Q", len(x)) + x


def kv_u32(key, v):
    return s(key) + struct.pack("<II", 4, v)


def kv_str(key, v):
    return s(key) + struct.pack("<I", 8) + s(v)


def header(n_tensors, n_kv, version=3):
    return b"GGUF" + struct.pack("<IqQ", version, n_tensors, n_kv)


def tensor_info(name, ne, ty=0, offset=0):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", n) for n in ne) + struct.pack("<IQ", ty, offset)


def pad(b, a=32):
    return b + b"\0" * ((-len(b)) % a)


def good_model():
    """A minimal well-formed llama checkpoint header + data (token_embd 8x4)."""
    kvs = [kv_str(b"general.architecture", b"llama"), kv_u32(b"llama.embedding_length", 8), kv_u32(b"llama.block_count", 0),
           kv_u32(b"llama.attention.head_count", 2), kv_u32(b"llama.feed_forward_length", 16), kv_u32(b"llama.context_length", 8)]
    return kvs


cases = []  # (file name, command kind, expected substring)


def gguf(name, data, expect, kind="model"):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    cases.append((name, kind, expect))


def corpus(name, data, expect):
    if data is not None:
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    cases.append((name, "corpus", expect))


os.makedirs(OUT, exist_ok=True)
for f in os.listdir(OUT):
    os.remove(os.path.join(OUT, f))

gguf("empty.gguf", b"", "empty file")
gguf("not-gguf.gguf", b"PK\x03\x04 this is a zip, not a model", "bad magic")
gguf("short-magic.gguf", b"GG", "shorter than 4 bytes")
gguf("version-1.gguf", header(0, 0, version=1), "unsupported GGUF version 1")
gguf("version-huge.gguf", header(0, 0, version=0x03000000), "a big-endian GGUF (version 3 byte-swapped)")
gguf("truncated-header.gguf", b"GGUF" + struct.pack("<I", 3) + b"\x01\x00", "truncated")
gguf("negative-count.gguf", header(-1, 0), "negative counts")
gguf("huge-kv-count.gguf", header(0, 1 << 40), "cannot fit")
gguf("key-past-eof.gguf", header(0, 1) + struct.pack("<Q", 1 << 30) + b"abc" + b"\0" * 16, "claims 1073741824 bytes")
gguf("bad-value-type.gguf", header(0, 1) + s(b"k") + struct.pack("<I", 99), "invalid type 99")
gguf("nested-array.gguf", header(0, 1) + s(b"k") + struct.pack("<IIQ", 9, 9, 1), "nested arrays")
gguf("array-past-eof.gguf", header(0, 1) + s(b"k") + struct.pack("<IIQ", 9, 4, 1 << 40), "cannot fit")
gguf("bool-2.gguf", header(0, 1) + s(b"k") + struct.pack("<I", 7) + b"\x02", "bool values must be 0 or 1")
gguf("duplicate-key.gguf", header(0, 2) + kv_u32(b"a", 1) + kv_u32(b"a", 2), "duplicate metadata key")
gguf("bad-alignment.gguf", header(0, 1) + kv_u32(b"general.alignment", 3), "not a power of 2")
gguf("alignment-type.gguf", header(0, 1) + kv_str(b"general.alignment", b"32"), "general.alignment must be a u32")
kv = good_model()
base = header(1, len(kv)) + b"".join(kv)
gguf("five-dims.gguf", pad(base + tensor_info(b"token_embd.weight", [8, 4, 1, 1, 1])), "5 dimensions")
gguf("negative-dim.gguf", pad(base + tensor_info(b"token_embd.weight", [8, -4])), "negative dimension")
gguf("unknown-type.gguf", pad(base + tensor_info(b"token_embd.weight", [8, 4], ty=4)), "unknown or removed type 4")
gguf("block-size.gguf", pad(base + tensor_info(b"token_embd.weight", [7, 4], ty=8)), "not a multiple of the q8_0 block size")
gguf("offset-wrong.gguf", pad(base + tensor_info(b"token_embd.weight", [8, 4], offset=64)), "data offset 64, expected 0")
gguf("data-past-eof.gguf", pad(base + tensor_info(b"token_embd.weight", [8, 4])) + b"\0" * 16, "data ends past the end of the file")
gguf("long-name.gguf", pad(base + tensor_info(b"x" * 80, [8, 4])), "name of 80 bytes")
two = header(2, len(kv)) + b"".join(kv)
gguf("duplicate-tensor.gguf", pad(two + tensor_info(b"a", [8]) + tensor_info(b"a", [8], offset=32)) + b"\0" * 64, "duplicate tensor name")
gguf("no-embedding.gguf", pad(base + tensor_info(b"other.weight", [8, 4])) + b"\0" * 128, "no token_embd.weight")
arch = header(1, 1) + kv_str(b"general.architecture", b"bert")
gguf("wrong-arch.gguf", pad(arch + tensor_info(b"token_embd.weight", [8, 4])) + b"\0" * 128, "architecture \"bert\" is not supported")
noarch = header(1, 0)
gguf("missing-arch.gguf", pad(noarch + tensor_info(b"token_embd.weight", [8, 4])) + b"\0" * 128, "general.architecture")
corpus("odd-size.bin", b"\x01\x00\x00\x00\x02\x00", "not a whole number of i32 ids")
corpus("negative-id.bin", struct.pack("<3i", 1, -5, 2), "negative id -5")
corpus("empty.txt", b"", "is empty")
corpus("not-utf8.md", b"Once upon a time \xff\xfe there", "not UTF-8")
corpus("out-of-vocab.txt", b"1 2 3\n4 5 6\n7 8 1000000\n", "out-of-vocab.txt:3:5: id 1000000 is outside the vocabulary of 100")
corpus("short.bin", struct.pack("<4i", 1, 2, 3, 4), "fewer than one window")
corpus("missing.bin", None, "does not exist")

with open(os.path.join(OUT, "expected.tsv"), "w") as f:
    f.write("# file\tcommand\texpected text in the one-line error (exit code 2)\n")
    for name, kind, expect in cases:
        if expect:
            f.write(f"{name}\t{kind}\t{expect}\n")
print(f"{len([c for c in cases if c[2]])} hostile fixtures in {OUT}")
