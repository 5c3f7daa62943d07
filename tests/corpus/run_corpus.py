#!/usr/bin/env python3
"""run_corpus.py: generates the malformed-input corpus (make_corpus.py) and runs every
case, asserting per case:
  - the exit status is one of the expected ones (never a signal, never 0 where an error
    is expected);
  - on a non-zero exit, stderr holds a "specula: " message with every expected substring
    (the file or option, and the problem);
  - no sanitizer report (AddressSanitizer, LeakSanitizer, UBSan "runtime error");
  - it finishes within the time limit (--timeout, default 10 s; a case may set its own).
Cases marked xfail (tests/corpus/xfail.json: code owned elsewhere) are reported but do
not fail the run; one that passes is reported as XPASS so the mark can be removed.

usage: run_corpus.py SPECULA SOURCE_DIR OUT_DIR [--timeout S] [--filter SUBSTR] [-v]
"""
import json
import os
import subprocess
import sys
import time

SPECULA, SRC, OUT = (os.path.abspath(a) for a in sys.argv[1:4])
args = sys.argv[4:]
TIMEOUT = float(args[args.index("--timeout") + 1]) if "--timeout" in args else \
    float(os.environ.get("SPECULA_CORPUS_TIMEOUT", "10"))
FILTER = args[args.index("--filter") + 1] if "--filter" in args else ""
VERBOSE = "-v" in args
SCALE = TIMEOUT / 10.0

subprocess.run([sys.executable, os.path.join(SRC, "tests", "corpus", "make_corpus.py"), SRC, OUT],
               check=True)
manifest = json.load(open(os.path.join(OUT, "manifest.json")))
env = dict(os.environ, SPECULA_THREADS=os.environ.get("SPECULA_THREADS", "2"))
SANITIZER = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "ThreadSanitizer")


def subst(s, cdir):
    return (s.replace("{S}", SPECULA).replace("{C}", cdir)
            .replace("{F}", os.path.join(SRC, "tests", "fixtures")).replace("{M}", os.path.join(SRC, "models")))


def run_case(c):
    cdir = os.path.join(OUT, "cases", c["id"].replace("/", "__"))
    argv = [subst(a, cdir) for a in c["argv"]]
    argv = [a.encode("utf-8", "surrogateescape") for a in argv]
    # a case's own limit (a budget it must stop within) grows at most 2x under sanitizers
    limit = c["timeout"] * min(SCALE, 2.0) if c["timeout"] else TIMEOUT
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=limit,
                           env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"timed out after {limit:.0f} s", time.monotonic() - t0, ""
    dt = time.monotonic() - t0
    err = p.stderr.decode("utf-8", "replace")
    for s in SANITIZER:
        if s in err:
            return f"sanitizer report ({s})", dt, err
    if p.returncode not in c["exit"]:
        return f"exit {p.returncode}, expected {c['exit']}", dt, err
    if p.returncode != 0:
        if "specula: " not in err:
            return "no 'specula: ' message on stderr", dt, err
        for n in c["stderr"]:
            n = subst(n, cdir)
            if n not in err:
                return f"stderr lacks '{n}'", dt, err
    return None, dt, err


fails, xfails, xpasses, n_run, slowest = [], [], [], 0, (0.0, "")
groups = {}
for c in manifest["cases"]:
    if FILTER and FILTER not in c["id"]:
        continue
    n_run += 1
    why, dt, err = run_case(c)
    g = c["id"].split("/")[0]
    groups.setdefault(g, [0, 0])[0] += 1
    if dt > slowest[0]:
        slowest = (dt, c["id"])
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if why and c["xfail"]:
        xfails.append(c["id"])
        print(f"xfail {c['id']}: {why} ({c['xfail']})")
    elif why:
        fails.append(c["id"])
        groups[g][1] += 1
        print(f"FAIL  {c['id']}: {why}\n      {' '.join(c['argv'])}\n      stderr: {err.strip()[-2000:]}")
    elif c["xfail"]:
        xpasses.append(c["id"])
        print(f"XPASS {c['id']} (marked: {c['xfail']})")
    elif VERBOSE:
        print(f"ok    {c['id']} ({dt:.2f} s) {last[:160]}")

print("corpus: " + ", ".join(f"{g} {n - f}/{n}" for g, (n, f) in sorted(groups.items())))
print(f"corpus: {n_run} cases, {n_run - len(fails) - len(xfails)} as expected, {len(fails)} failed, "
      f"{len(xfails)} expected failures, {len(xpasses)} unexpected passes; slowest {slowest[1]} "
      f"{slowest[0]:.2f} s")
sys.exit(1 if fails else 0)
