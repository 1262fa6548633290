"""Dense peak throughput of common GPUs (vendor datasheets, no sparsity) and the regime rule.

Matched by substring of the device name, most specific first. FP32 is the non-tensor-core peak:
PyTorch does not use TF32 for float32 matmuls unless asked to. Unknown devices (and every CPU)
have no peak here: throughput is then reported without a fraction of peak.
"""

from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class Peak:
    bf16_tflops: float
    fp16_tflops: float
    fp32_tflops: float
    bandwidth_gbps: float  # GB/s of device memory

    def flops_per_s(self, dtype: str) -> float:
        return {"bf16": self.bf16_tflops, "fp16": self.fp16_tflops, "fp32": self.fp32_tflops}[dtype] * 1e12

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9


PEAKS: tuple[tuple[str, Peak], ...] = (
    ("GH200", Peak(989.0, 989.0, 67.0, 4000.0)),  # before H200 and H100: its name holds "H200"
    ("H200", Peak(989.0, 989.0, 67.0, 4800.0)),
    ("H100 PCIe", Peak(756.0, 756.0, 51.0, 2000.0)),
    ("H100", Peak(989.0, 989.0, 67.0, 3350.0)),
    ("A100-SXM4-80GB", Peak(312.0, 312.0, 19.5, 2039.0)),
    ("A100 80GB PCIe", Peak(312.0, 312.0, 19.5, 1935.0)),
    ("A100", Peak(312.0, 312.0, 19.5, 1555.0)),
    ("L40S", Peak(362.0, 362.0, 91.6, 864.0)),
    ("L4", Peak(121.0, 121.0, 30.3, 300.0)),
    ("A10G", Peak(70.0, 70.0, 31.2, 600.0)),
    ("A10", Peak(125.0, 125.0, 31.2, 600.0)),
    ("V100", Peak(0.0, 125.0, 15.7, 900.0)),
    ("T4", Peak(0.0, 65.0, 8.1, 320.0)),
    ("MI300X", Peak(1307.0, 1307.0, 163.4, 5300.0)),
)


def peak_for(device_name: str | None) -> Peak | None:
    if not device_name:
        return None
    for key, peak in PEAKS:
        if key in device_name:
            return peak
    return None
