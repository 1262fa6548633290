"""The hand-made way: a standalone article-style script, one grid point per run.

    python benchmarks/article_script.py --size 1024 --dtype bf16 --compile --out DIR

Profiles torch.add(torch.matmul(x, w), b) with schedule(wait=1, warmup=1, active=3) and writes
<size>_<dtype>_<cold|warm>_<eager|compile>.json / .txt, as the article's 01_matmul_add.py does.
"""

import argparse
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    x, w, b = (torch.randn(args.size, args.size, device=device, dtype=dtype) for _ in range(3))

    def matmul_add(x, w, b):
        return torch.add(torch.matmul(x, w), b)

    fn = torch.compile(matmul_add) if args.compile else matmul_add
    if args.warm:
        for _ in range(3):
            fn(x, w, b)
        if device == "cuda":
            torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=3)) as prof:
        for _ in range(5):
            with record_function("matmul_add"):
                fn(x, w, b)
            prof.step()
    name = f"{args.size}_{args.dtype}_{'warm' if args.warm else 'cold'}_{'compile' if args.compile else 'eager'}"
    args.out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(args.out / f"{name}.json"))
    sort_by = "cuda_time_total" if device == "cuda" else "cpu_time_total"
    (args.out / f"{name}.txt").write_text(prof.key_averages().table(sort_by=sort_by, row_limit=15))


if __name__ == "__main__":
    with torch.no_grad():
        main()
