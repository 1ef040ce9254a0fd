import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1], errors='replace')))
h=None
for i,r in enumerate(rows):
    if 'Kernel Name' in r: h=i; break
if h is None: print('no ncu rows', sys.argv[1]); sys.exit()
H=rows[h]; kn=H.index('Kernel Name'); t=H.index('gpu__time_duration.sum')
data=[r for r in rows[h+2:] if len(r)==len(H)]
half=data[len(data)//2:]
agg=collections.defaultdict(lambda:[0,0.0])
for r in half:
    try: v=float(r[t].replace(',',''))
    except: continue
    k=r[kn][:90]; agg[k][0]+=1; agg[k][1]+=v
tot=sum(v for _,v in agg.values())
print('==', sys.argv[2], 'kernels', sum(c for c,_ in agg.values()), 'total us', round(tot/1e3,1))
for k,(c,v) in sorted(agg.items(), key=lambda x:-x[1][1])[:int(sys.argv[3]) if len(sys.argv)>3 else 40]:
    print(f'{v/1e3:9.1f} us {c:5d}  {k}')
