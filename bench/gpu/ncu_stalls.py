#!/usr/bin/env python3
"""ncu_stalls.py: where a kernel's warps wait, instruction by instruction.

Reads the CSV of ncu's source page (per SASS instruction, the stall sampling of
`--section SourceCounters`) and prints, per kernel, the samples summed by stall reason,
the same split by how often the lines ran (lines that run equally often are one part of
the kernel: a loop's body once an item, a prologue once a warp; for each such group its
lines, warp instructions, samples, reasons and commonest opcodes: where "selected" and
"not selected" dominate, that part issues nearly every cycle and only fewer instructions
make it faster), and the N instructions with the most samples (reasons with at least 3
samples, how often the instruction ran, the two instructions before it). Made like this
on the GPU machine:

  ncu --section SourceCounters -k regex:NAME --launch-count 2 -o rep  CMD...
  ncu --import rep.ncu-rep --page source --csv --print-source sass > src.csv
  bench/gpu/ncu_stalls.py src.csv [N]
"""
import csv
import sys

SAMPLES = 'Warp Stall Sampling (All Samples)'


def kernels(rows):
    """Splits the CSV into (kernel name, header, instruction rows)."""
    out = []
    for r in rows:
        if r and r[0] == 'Kernel Name':
            out.append([r[1], None, []])
        elif out and out[-1][1] is None:
            out[-1][1] = r
        elif out:
            out[-1][2].append(r)
    return out


def opcode(src):
    """The opcode of a SASS line, its predicate (@P0) left out."""
    words = src.split()
    if words and words[0].startswith('@'):
        words = words[1:]
    return words[0] if words else '?'


def by_count(body, reasons, val, groups=6):
    """The samples of the lines grouped by their execution count, the largest groups."""
    part = {}
    for r in body:
        n = int(val(r, 'Instructions Executed'))
        if n > 0:
            part.setdefault(n, []).append(r)
    order = sorted(part, key=lambda n: -sum(val(r, SAMPLES) for r in part[n]))
    for n in order[:groups]:
        rs = part[n]
        sam = sum(val(r, SAMPLES) for r in rs)
        why = {c: sum(val(r, c) for r in rs) for c in reasons}
        ops = {}
        for r in rs:
            ops[opcode(r[1])] = ops.get(opcode(r[1]), 0) + 1
        common = sorted(ops.items(), key=lambda t: -t[1])[:6]
        print('  lines run %d times: %d lines, %d warp instructions, %d samples: %s; %s' %
              (n, len(rs), n * len(rs), sam,
               ' '.join('%s=%d' % (c[6:], why[c]) for c in reasons if why[c] >= 1),
               ' '.join('%s %d' % t for t in common)))


def main():
    if len(sys.argv) < 2:
        sys.exit('usage: ncu_stalls.py SOURCE.csv [N]')
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with open(sys.argv[1], newline='') as f:
        rows = list(csv.reader(f))
    for name, hdr, body in kernels(rows):
        ix = {n: i for i, n in enumerate(hdr or [])}
        if SAMPLES not in ix:
            continue

        def val(r, col):
            try:
                return float(r[ix[col]].replace(',', ''))
            except (KeyError, IndexError, ValueError):
                return 0.0

        reasons = [c for c in hdr if c.startswith('stall_') and '(Not' not in c]
        total = sum(val(r, SAMPLES) for r in body)
        sums = {c: sum(val(r, c) for r in body) for c in reasons}
        print(name, 'samples', int(total),
              ' '.join('%s=%d' % (c[6:], sums[c]) for c in reasons if sums[c] > 0))
        by_count(body, reasons, val)
        order = sorted(range(len(body)), key=lambda i: -val(body[i], SAMPLES))
        for i in order[:top]:
            r = body[i]
            before = ' | '.join(body[j][ix['Source']][:28] for j in range(max(0, i - 2), i))
            why = ' '.join('%s=%d' % (c[6:], val(r, c)) for c in reasons if val(r, c) >= 3)
            print(' %5d %-50s %s exec=%d  <- %s' % (val(r, SAMPLES), r[ix['Source']][:50], why,
                                                    val(r, 'Instructions Executed'), before))


if __name__ == '__main__':
    main()
