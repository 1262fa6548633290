"""The peer: Holistic Trace Analysis loads one trace and computes its GPU kernel breakdown.
Run by benchmarks/trace_vs_hta.py with HTA's own virtual environment."""

import sys
from pathlib import Path

from hta.trace_analysis import TraceAnalysis

path = Path(sys.argv[1]).resolve()
analyzer = TraceAnalysis(trace_dir=str(path.parent), trace_files={0: path.name})
kernel_type, kernels = analyzer.get_gpu_kernel_breakdown(visualize=False)
print(len(kernels))
