"""Stall samples and executed instructions of one ncu source page (scripts/ncu_source.sh's
src_*.csv.gz) by source line, through the profiled cubin's line table (session 46; session 45
did this by hand). The page's rows are the kernel's SASS instructions in order, and
`nvdisasm -gi` prints, before each instruction, the line it came from and the lines it was
inlined at: so the i-th instruction of the disassembled kernel is the page's i-th row.
    python3 scripts/ncu_lines.py PAGE.csv.gz CUBIN KERNEL_MANGLED_NAME [--depth N] [--top K]
CUBIN: `cuobjdump -xelf <name>.sm_90a.cubin LIB.so` from the wheel that was profiled.
--depth 0 (default) charges each instruction to its innermost line; --depth 1 to the line that
inlined it (one level out), and so on (the last line of the chain where the chain is shorter).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import sysconfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_stalls_by_count import count, read_source_page  # noqa: E402

LINE = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
INSN = re.compile(r"^\s*/\*[0-9a-f]{4,6}\*/\s+(.*?)\s*;?\s*$")


def nvdisasm():
    """pip's nvidia-cuda-nvdisasm (where ../shared/tools/sass_report.py installs it), else PATH's."""
    path = os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "cu13", "bin", "nvdisasm")
    return path if os.path.exists(path) else "nvdisasm"


def line_chains(cubin, kernel):
    """[(chain, sass)] for each instruction of kernel: chain = [(file, line), ...] innermost first."""
    text = subprocess.run([nvdisasm(), "-gi", "-c", cubin], capture_output=True, text=True, check=True).stdout
    start = text.index(f"//--------------------- .text.{kernel} ")
    end = text.find("//--------------------- ", start + 10)
    out, chain = [], []
    pending = False  # the comment block before an instruction: its first line is the innermost
    for raw in text[start:end if end > 0 else None].splitlines():
        m = LINE.search(raw)
        if m:  # a block of lines, innermost first, each inlined at the next one's line
            if not pending:
                chain = []
            here = (os.path.basename(m.group(1)), int(m.group(2)))
            if not chain or chain[-1] != here:
                chain.append(here)
            if m.group(3):
                chain.append((os.path.basename(m.group(3)), int(m.group(4))))
            pending = True
            continue
        i = INSN.match(raw)
        if i:
            out.append((list(chain), i.group(1)))
            pending = False
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("page")
    ap.add_argument("cubin")
    ap.add_argument("kernel")
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args(argv)
    rows = read_source_page(a.page)
    insns = line_chains(a.cubin, a.kernel)
    if len(insns) != len(rows):
        sys.exit(f"{len(insns)} instructions in the cubin's kernel against {len(rows)} rows in the page: not the profiled build")
    samples, executed = collections.Counter(), collections.Counter()
    for (chain, sass), r in zip(insns, rows):
        if sass.split()[0] != r["Source"].split()[0]:
            sys.exit(f"instruction mismatch: {sass!r} against {r['Source']!r}")
        key = chain[min(a.depth, len(chain) - 1)] if chain else ("?", 0)
        samples[key] += count(r, "Warp Stall Sampling (All Samples)")
        executed[key] += count(r, "Instructions Executed")
    ts, te = sum(samples.values()) or 1, sum(executed.values()) or 1
    print(f"{a.page}: {ts} samples, {te} warp instructions executed; by line (depth {a.depth})")
    print("| line | samples % | executed % |\n|---|---|---|")
    for key, n in samples.most_common(a.top):
        print(f"| {key[0]}:{key[1]} | {100 * n / ts:.1f} | {100 * executed[key] / te:.1f} |")


if __name__ == "__main__":
    main()
