#!/usr/bin/env bash
# call 8: gpt2 medium bf16 (13.4 ms vs llama medium 9.9): attention A/B and an ncu kernel summary of one step
cd "$(dirname "$0")/../.."
bash scripts/gpu/cuda-session.sh info >/dev/null 2>&1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break; done
for a in fused reference; do for arch in gpt2 llama; do
  timeout 60 .devcarry/toy debug bench --preset medium --arch $arch --dtype bf16 --device cuda --steps 20 --warmup 5 --attention $a 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('$arch medium $a', round(d['median_ms'],3))" >> $OUT/c8.log
done; done
for arch in gpt2 llama; do
GGML_CUDA_DISABLE_GRAPHS=1 timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  .devcarry/toy debug bench --preset medium --arch $arch --dtype bf16 --device cuda --steps 1 --warmup 1 > $OUT/ncu-$arch.csv 2>/dev/null
python3 - $OUT/ncu-$arch.csv $arch >> $OUT/c8.log <<'PY'
import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
h=None
for i,r in enumerate(rows):
    if 'Kernel Name' in r: h=i; break
if h is None: print('no ncu rows'); sys.exit()
H=rows[h]; kn=H.index('Kernel Name'); t=H.index('gpu__time_duration.sum')
data=[r for r in rows[h+2:] if len(r)==len(H)]
# second half = the timed step (warmup 1 + step 1)
half=data[len(data)//2:]
agg=collections.defaultdict(lambda:[0,0.0])
for r in half:
    try: v=float(r[t].replace(',',''))
    except: continue
    k=r[kn][:70]; agg[k][0]+=1; agg[k][1]+=v
tot=sum(v for _,v in agg.values())
print('==', sys.argv[2], 'kernels', sum(c for c,_ in agg.values()), 'total us', round(tot/1e3,1))
for k,(c,v) in sorted(agg.items(), key=lambda x:-x[1][1])[:18]:
    print(f'{v/1e3:9.1f} us {c:5d}  {k}')
PY
done
cat $OUT/c8.log
