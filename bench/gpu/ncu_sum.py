"""ncu_sum.py: per-kernel sums of the last forward pass in an ncu --csv log.

    ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
        specula generate -m DIR --device cuda --tokens 1 -n 3 --temp 0 > log.csv
    python3 bench/gpu/ncu_sum.py log.csv [passes (default 3)]

The log's launches are cut into `passes` equal parts (run with SPECULA_CUDA_GRAPHS=0 and a
prompt of one token, so every pass is a decode-shaped step); the last part is summed per
kernel name and grid: launches, microseconds, microseconds a launch, DRAM GB/s read.
"""
import csv,collections,re,io,sys
txt=open(sys.argv[1]).read()
i=txt.index('"ID"'); rows=list(csv.DictReader(io.StringIO(txt[i:])))
ks=collections.OrderedDict()
for r in rows:
    k=ks.setdefault(r["ID"],{"name":r["Kernel Name"],"grid":r["Grid Size"],"block":r["Block Size"]})
    try: v=float(r["Metric Value"].replace(",",""))
    except: continue
    u=r["Metric Unit"]; m=r["Metric Name"]
    if m.startswith("gpu__time"): v*= {"ns":1e-3,"us":1,"usecond":1,"nsecond":1e-3,"ms":1e3,"msecond":1e3}.get(u,1)
    if m.startswith("dram"): v*= {"byte":1,"Kbyte":1e3,"Mbyte":1e6,"Gbyte":1e9,"KB":1e3,"MB":1e6,"GB":1e9}.get(u,1)
    k[m]=v
ks=list(ks.values())
npass=int(sys.argv[2]) if len(sys.argv)>2 else 3
per=len(ks)//npass
last=ks[len(ks)-per:]
tot=sum(k["gpu__time_duration.sum"] for k in last)
g=collections.OrderedDict()
for k in last:
    key=re.sub(r"\(.*","",k["name"]).replace("void ","")+" grid"+k["grid"]
    a=g.setdefault(key,[0,0.0,0.0]); a[0]+=1; a[1]+=k["gpu__time_duration.sum"]; a[2]+=k.get("dram__bytes_read.sum",0)
print(f"{len(ks)} kernels, {per} a pass; last pass {tot:.0f} us")
print("| kernel | grid | launches | us | us each | GB/s |")
print("|---|---|---|---|---|---|")
for key,(n,t,b) in sorted(g.items(),key=lambda x:-x[1][1]):
    nm,gr=key.split(" grid")
    print(f"| {nm} | {gr} | {n} | {t:.1f} | {t/n:.2f} | {b/t/1e3 if t else 0:.0f} |")
