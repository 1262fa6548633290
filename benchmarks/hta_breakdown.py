"""The peer: Holistic Trace Analysis loads one trace and computes its GPU kernel breakdown.
Run by benchmarks/trace_vs_hta.py with HTA's own virtual environment:

    HTA_PYTHON/bin/python benchmarks/hta_breakdown.py TRACE.json
"""

import sys
from pathlib import Path

if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__.strip())
    sys.exit(0 if len(sys.argv) == 2 else 2)
try:
    from hta.trace_analysis import TraceAnalysis
except ImportError:
    print("error: needs Holistic Trace Analysis in this interpreter (pip install HolisticTraceAnalysis); "
          "benchmarks/trace_vs_hta.py runs it in an environment of its own", file=sys.stderr)
    sys.exit(2)

path = Path(sys.argv[1]).resolve()
analyzer = TraceAnalysis(trace_dir=str(path.parent), trace_files={0: path.name})
kernel_type, kernels = analyzer.get_gpu_kernel_breakdown(visualize=False)
print(len(kernels))
