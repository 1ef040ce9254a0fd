"""Copy a llama GGUF with every matrix in f16 (1-D tensors stay f32), as
llama.cpp converts models: `python3 scripts/bench/f16-copy.py IN.gguf OUT.gguf`."""

import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter


def main(src, dst):
    r = GGUFReader(src)
    w = GGUFWriter(dst, str(r.fields["general.architecture"].contents()))
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k in ("general.architecture", "general.alignment"):
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), f.types[0], sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), f.types[0])
    for t in r.tensors:
        a = np.array(t.data)
        if a.ndim == 2:
            w.add_tensor(t.name, a.astype(np.float16), raw_dtype=GGMLQuantizationType.F16)
        else:
            w.add_tensor(t.name, a.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
