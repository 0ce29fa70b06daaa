#!/usr/bin/env python3
"""Rewrites the figure tables of docs/performance.md from the benchmarks' JSON.

    python3 scripts/perf_tables.py [--check] [--results DIR] [--doc FILE]

Reads every bench/results/*.json written by `mxf_bench_gpu OUT.json` (bench/bench_gpu.c:
{"device": ..., "rows": [{"section", "shape", "op", "kernel", "ms", "tflops", "gbps",
"ratio_vs_cublas_bf16", "ratio_vs_cublaslt_fp8", ...}]}) or `mxf_bench_cpu OUT.json`
(bench/bench_cpu.c: {"device": "cpu", "results": [{"op", "core", "m", "n", "k", "ms",
"gflops", "ratio", ...}]}), each with a sidecar OUT.meta.json naming where the figures come
from: {"commit": ..., "date": ..., "device": ..., "command": ...}. The tables replace what
lies between `<!-- perf:begin -->` and `<!-- perf:end -->` in the doc; the rest of the page
is left as it is. --check exits 1 when the doc is not what the JSON gives (nothing written).
"""
import argparse
import glob
import json
import os
import sys

BEGIN, END = "<!-- perf:begin -->", "<!-- perf:end -->"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SECTIONS = {
    "gemm": "gemm_amax (MXFP8 / MXFP4 operands, swizzled e8m0 scales per 32)",
    "mixed": "gemm_amax, mixed formats: bf16 / MXFP8 activations × MXFP4 weights, bf16 C",
    "proj": "proj_rope (DeepSeek-V3 Q up-projection: K = 1536, H = 128, D = 192)",
    "plan": "planning cost (µs per plan)",
}
SECOND = {"gemm": "× cuBLASLt FP8", "mixed": "× copy-bound + cuBLAS"}


def num(v, fmt):
    return "—" if v is None or (isinstance(v, (int, float)) and v < 0) else fmt.format(v)


def load(results):
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        if path.endswith(".meta.json"):
            continue
        with open(path) as f:
            data = json.load(f)
        meta_path = path[: -len(".json")] + ".meta.json"
        meta = {}
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                meta = json.load(f)
        meta.setdefault("device", data.get("device", "?"))
        runs.append((os.path.relpath(path, ROOT), data, meta))
    return sorted(runs, key=lambda r: "results" in r[1])  # GPU runs first, then the CPU


def source_line(path, meta):
    parts = [f"`{path}`", f"commit {meta.get('commit', '?')}", meta.get("date", "date ?"), meta["device"]]
    line = "Source: " + ", ".join(parts)
    if meta.get("command"):
        line += f" (`{meta['command']}`)"
    return line + "."


def family(kernel):
    """cuda/sm90 128x256 prepass (graph) -> sm90"""
    return kernel.split()[0].split("/")[-1] if kernel else "?"


def pivot(rows, value, fmt):
    """shape x op table of one value, in the order the benchmark wrote them. A (shape, op)
    measured again with another kernel forced keeps its first (default) row here; where
    an op's default kernel differs between shapes, each cell names it."""
    shapes, ops, cells = [], [], {}
    for r in rows:
        key = (r["shape"], r["op"])
        if key in cells:
            continue
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
        if r["op"] not in ops:
            ops.append(r["op"])
        cells[key] = r
    mixed = {o for o in ops if len({family(c.get("kernel")) for (s, oo), c in cells.items() if oo == o}) > 1}
    out = ["| shape | " + " | ".join(f"`{o}`" for o in ops) + " |", "|---" * (len(ops) + 1) + "|"]
    for s in shapes:
        line = []
        for o in ops:
            c = cells.get((s, o))
            v = num(c.get(value) if c else None, fmt)
            line.append(f"{v} ({family(c['kernel'])})" if c and o in mixed and v != "—" else v)
        out.append(f"| {s} | " + " | ".join(line) + " |")
    return out


def gpu_tables(path, data, meta):
    out = [f"### GPU: {meta['device']}", "", source_line(path, meta), ""]
    rows = data.get("rows", [])
    for sec, title in SECTIONS.items():
        srows = [r for r in rows if r.get("section") == sec]
        if not srows:
            continue
        out += [f"#### {title}", ""]
        if sec == "plan":
            out += ["| shape | op | kernel | median µs | max µs | first µs |", "|---|---|---|---|---|---|"]
            for r in srows:
                out.append(
                    f"| {r['shape']} | `{r['op']}` | `{r['kernel']}` | {num(r.get('plan_median_us'), '{:.1f}')} "
                    f"| {num(r.get('plan_max_us'), '{:.1f}')} | {num(r.get('plan_first_us'), '{:.1f}')} |"
                )
            out.append("")
            continue
        rated = [r for r in srows if (r.get("ratio_vs_cublas_bf16") or -1) > 0]
        if rated:
            out += ["Speed against cuBLAS BF16 on the same shape, in the same process (> 1: faster; "
                    "the first row of each op, its default kernel):", ""]
            out += pivot(rated, "ratio_vs_cublas_bf16", "{:.2f}") + [""]
        unrated = [r for r in srows if r not in rated]
        if unrated:
            out += ["Without a baseline (bandwidth-bound):", "", "| shape | op | kernel | ms | GB/s |", "|---|---|---|---|---|"]
            for r in unrated:
                out.append(f"| {r['shape']} | `{r['op']}` | `{r['kernel']}` | {num(r.get('ms'), '{:.4f}')} "
                           f"| {num(r.get('gbps'), '{:.0f}')} |")
            out.append("")
        out += ["<details><summary>every row: time, throughput, kernel</summary>", ""]
        out += [f"| shape | op | kernel | ms | TFLOP/s | GB/s | × cuBLAS BF16 | {SECOND.get(sec, '× other')} |"]
        out += ["|---|---|---|---|---|---|---|---|"]
        for r in srows:
            out.append(
                f"| {r['shape']} | `{r['op']}` | `{r['kernel']}` | {num(r.get('ms'), '{:.4f}')} "
                f"| {num(r.get('tflops'), '{:.1f}')} | {num(r.get('gbps'), '{:.0f}')} "
                f"| {num(r.get('ratio_vs_cublas_bf16'), '{:.2f}')} | {num(r.get('ratio_vs_cublaslt_fp8'), '{:.2f}')} |"
            )
        out += ["", "</details>", ""]
    return out


def cpu_tables(path, data, meta):
    out = [f"### CPU: {meta['device']}", "", source_line(path, meta), ""]
    missing = data.get("cores_missing", [])
    if missing:
        out += ["GEMM cores not in this build or processor: "
                + "; ".join(f"`cpu={m['core']}` ({m['why']})" for m in missing) + ".", ""]
    out += [f"Median of {data.get('runs', '?')} runs; time / baseline (< 1: faster than the baseline):", ""]
    out += ["| case | what | core | M (T) × N × K | ms | GFLOP/s | time / baseline | workspace MB |"]
    out += ["|---|---|---|---|---|---|---|---|"]
    extra, decode = [], []
    for r in data.get("results", []):
        if r.get("op") == "decode":
            decode.append(r)
            continue
        if "ms" not in r:
            extra.append(r)
            continue
        base = f"{r['ratio']:.2f} × `{r['baseline']}`" if "ratio" in r else "—"
        out.append(
            f"| `{r['op']}` | {r.get('what', '')} | {r.get('core') or '—'} | {r['m']} × {r['n']} × {r['k']} "
            f"| {r['ms']:.2f} | {r.get('gflops', 0):.1f} | {base} | {r.get('workspace_bytes', 0) / 1e6:.1f} |"
        )
    out.append("")
    if decode:
        bw = next((r["gbs"] for r in extra if r.get("op") == "read_bandwidth"), None)
        out += ["Decode: bf16 A (M × K) times weights (N × K), compact scales, f32 C, the default core "
                "(`proj_rope` rows: M = T tokens, its bf16 or MXFP8 inputs, w out-in); "
                "GB/s of weight bytes (codes and scales) and their share of the read bandwidth "
                "(all threads reading a buffer beyond the last-level cache"
                + (f"; {bw:.1f} GB/s at the start" if bw else "")
                + ", and around each row: read GB/s); the same weights packed (SPEC §7, "
                "`mxf_pack_weights`): packed ms and its share of the read bandwidth on the same byte count; "
                "`sgemm` on the weights dequantized to f32 beforehand (8× or 4× the bytes), same process:", ""]
        out += ["| weights | M | N × K | ms | weight GB/s | read GB/s | of read | packed ms | packed of read "
                "| sgemm ms | time / sgemm |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in decode:
            packed = (f"{r['packed_ms']:.3f} | {100 * r['packed_of_read']:.0f} %" if r.get("packed_ms")
                      else "— | —")
            out.append(f"| {r['what'].replace('bf16 x ', '')} | {r['m']} | {r['n']} × {r['k']} | {r['ms']:.3f} "
                       f"| {r['weight_gbs']:.2f} | {r['read_gbs']:.1f} | {100 * r['of_read']:.0f} % "
                       f"| {packed} | {r['sgemm_ms']:.3f} | {r['ms'] / r['sgemm_ms']:.2f} |")
        out.append("")
    for r in extra:
        if r.get("op") == "invariance":
            out.append(f"- Invariance (SPEC §5.1), {r['how']}: {r['differing_bytes']} bytes of C differ.")
        elif r.get("op") == "workspace":
            out.append(
                f"- {r['what']}: a plan at M = 64 asks {r['workspace_bytes_m64'] / 1e6:.1f} MB of workspace, "
                f"the plans of M = 1..64 together {r['workspace_bytes_m1_to_64'] / 1e6:.1f} MB."
            )
        elif r.get("op") == "one_call_rss":
            out.append(f"- {r['what']}: peak RSS grows by {r['peak_rss_growth_mib']:.1f} MiB.")
    if extra:
        out.append("")
    return out


def render(runs):
    out = [BEGIN, "<!-- written by scripts/perf_tables.py from bench/results/*.json; edit those, not this -->", ""]
    if not runs:
        out += ["No benchmark results in bench/results/ yet.", ""]
    for path, data, meta in runs:
        out += cpu_tables(path, data, meta) if "results" in data else gpu_tables(path, data, meta)
    out.append(END)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the doc differs, write nothing")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    args = ap.parse_args()
    with open(args.doc) as f:
        text = f.read()
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        sys.exit(f"{args.doc}: no {BEGIN} ... {END} block")
    new = text[:b] + render(load(args.results)) + text[e + len(END):]
    if args.check:
        if new != text:
            sys.exit(f"{args.doc} is not what bench/results gives: run scripts/perf_tables.py")
        return
    if new != text:
        with open(args.doc, "w") as f:
            f.write(new)
        print(f"wrote {os.path.relpath(args.doc)}")


if __name__ == "__main__":
    main()
