"""Copy a llama GGUF with every matrix (2-D tensor) in another type, 1-D
tensors f32, as llama.cpp converts and quantizes models:

    python3 scripts/bench/typed-copy.py IN.gguf OUT.gguf [TYPE] [--embd TYPE]

TYPE: f32, f16 (default), q8_0, q4_0, q4_1, q5_0, q5_1 (gguf-py's quantizers,
bit-exact with ggml's reference ones). `--embd` gives token_embd.weight its own
type (SmolLM2's Q4_1 file keeps it q8_0). Quantized inputs are dequantized first;
a matrix whose rows do not split into the type's blocks is written f16."""

import argparse
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import quantize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "parity"))
from toygguf import values  # noqa: E402  (a tensor as f32, dequantized)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("type", nargs="?", default="f16")
    p.add_argument("--embd", help="type of token_embd.weight (default: TYPE)")
    a = p.parse_args()
    r = GGUFReader(a.src)
    w = GGUFWriter(a.dst, str(r.fields["general.architecture"].contents()))
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k in ("general.architecture", "general.alignment"):
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), f.types[0], sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), f.types[0])
    for t in r.tensors:
        v = values(t)
        name = (a.embd or a.type) if t.name == "token_embd.weight" else a.type
        qt = GGMLQuantizationType[name.upper()]
        if v.ndim != 2 or qt == GGMLQuantizationType.F32:
            w.add_tensor(t.name, v)
        elif qt == GGMLQuantizationType.F16:
            w.add_tensor(t.name, v.astype(np.float16), raw_dtype=qt)
        elif v.shape[-1] % GGML_QUANT_SIZES[qt][0] != 0:
            # Rows that do not split into blocks stay f16, as llama-quantize keeps them.
            print(f"typed-copy: {t.name} rows of {v.shape[-1]} do not split into {name} blocks; f16", file=sys.stderr)
            w.add_tensor(t.name, v.astype(np.float16), raw_dtype=GGMLQuantizationType.F16)
        else:
            w.add_tensor(t.name, quantize(v, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
