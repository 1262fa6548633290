"""The ceilings a grid point's throughput is held against: this machine's, measured before the
sweep (profsweep.ceilings, recorded in environment.json), else a GPU's datasheet peak.

Datasheet peaks (dense, no sparsity) are matched by substring of the device name, most specific
first. FP32 is the non-tensor-core peak: PyTorch does not use TF32 for float32 matmuls unless
asked to. A CPU has no datasheet peak here: without measured ceilings its throughput is reported
without a fraction of peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from profsweep.ceilings import Ceiling

FLOPS_RANGE = (1e6, 1e19)  # FLOP/s a measured ceiling can be (a CPU core's MFLOP/s to beyond any GPU's)
BYTES_RANGE = (1e6, 1e15)  # bytes/s likewise
RANGE_FACTOR = 2.0  # a ridge's range takes a slowest matmul process or a copy rate this close to its ceiling's
MEASURED = "measured"  # peak_source: this machine's ceilings (its date follows) ...
DATASHEET = "datasheet"  # ... or the vendor's numbers

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


def ran_dtype(row: dict[str, Any]) -> Any:
    """The dtype a grid point's step ran in (`ran_dtype`: the most bytes of its parameters and
    inputs, which a factory that ignores `dtype` decides, or the dtype every matrix product ran in
    where that differs: torch.autocast in the step), else the grid's: the ceiling it is held
    against is that dtype's (an fp32 model swept at dtype=bf16 is no fraction of the bf16 peak)."""
    ran = row.get("ran_dtype")
    return ran if isinstance(ran, str) and ran else row.get("dtype")


def peak_for(device_name: str | None) -> Peak | None:
    if not device_name:
        return None
    for key, peak in PEAKS:
        if key in device_name:
            return peak
    return None


def _plausible(value: Any, low: float, high: float) -> bool:
    """A number from an untrusted file within [low, high] (no bool, NaN, infinity or a huge int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return low <= float(value) <= high
    except OverflowError:
        return False


@dataclass(frozen=True)
class Ceilings:
    """A sweep's ceilings as its environment.json records them."""

    mode: str  # run.ceilings: measure | table | off ("table" for sweeps from before it existed)
    measured: tuple[Ceiling, ...] = ()

    @classmethod
    def of(cls, environment: Any) -> Ceilings:
        """From environment.json's data (untrusted: a malformed entry is left out)."""
        if not isinstance(environment, dict):
            return cls("table")
        mode = environment.get("ceilings_mode")
        found = []
        for entry in environment.get("ceilings") or [] if isinstance(environment.get("ceilings"), list) else []:
            try:
                ceiling = Ceiling.from_dict(entry)
            except (TypeError, ValueError, AttributeError):
                continue
            if (_plausible(ceiling.flops_per_s, *FLOPS_RANGE) and _plausible(ceiling.bytes_per_s, *BYTES_RANGE)
                    and isinstance(ceiling.device, str) and isinstance(ceiling.dtype, str)):
                found.append(ceiling)
        return cls(mode if mode in ("measure", "table", "off") else "table", tuple(found))

    def peak(self, row: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
        """(FLOP/s, bytes/s, where they come from) that a grid point's throughput is held against:
        the measured ceiling of its device, dtype and threads, else its GPU's datasheet peak."""
        if self.mode == "off":
            return None, None, None
        c = self._measured(row)
        if c is not None:
            return c.flops_per_s, c.bytes_per_s, f"{MEASURED} {str(c.measured_at)[:10]}"
        peak = peak_for(row.get("device_name")) if row.get("platform") not in (None, "cpu") else None
        if peak is None:
            # memory moves bytes whatever they hold: a step in a dtype whose matmul peak was not
            # measured (int64 products, float64) is still held against the device's bandwidth
            c = self._measured(row, any_dtype=True)
            return (None, c.bytes_per_s, f"{MEASURED} {str(c.measured_at)[:10]}") if c is not None else (None, None, None)
        dtype = ran_dtype(row)
        return (peak.flops_per_s(dtype) if dtype in ("bf16", "fp16", "fp32") else None), peak.bytes_per_s, DATASHEET

    def ridge(self, row: dict[str, Any]) -> tuple[float, float, float] | None:
        """The roofline's ridge (FLOP per byte where the two ceilings meet) for a grid point, with
        the range its own measurement leaves: the matmul rate between the slowest process's and the
        best, over the memory rate between STREAM's copy and triad. A datasheet's ridge is exact
        (low = high); None without both ceilings."""
        peak_f, peak_b, _ = self.peak(row)
        if not peak_f or not peak_b:
            return None
        ridge = peak_f / peak_b
        c = self._measured(row)
        if c is None:
            return ridge, ridge, ridge
        # untrusted numbers: a rate more than RANGE_FACTOR from its ceiling's is left out, not let
        # widen the range until every point is at the ridge
        f_low = c.matmul_low if _plausible(c.matmul_low, peak_f / RANGE_FACTOR, peak_f) else peak_f
        copy = c.copy_bytes_per_s
        rates = [peak_b] + ([copy] if _plausible(copy, peak_b / RANGE_FACTOR, peak_b * RANGE_FACTOR) else [])
        return ridge, f_low / max(rates), peak_f / min(rates)

    def _measured(self, row: dict[str, Any], any_dtype: bool = False) -> Ceiling | None:
        """The measured ceiling of the row's device, dtype and threads (a GPU's: of its name);
        `any_dtype`: of any dtype, for its bandwidth."""
        device = "cpu" if row.get("platform") in (None, "cpu") else "cuda"
        threads = row.get("torch_threads")
        name = row.get("device_name")
        for c in self.measured:
            same = c.threads == threads if device == "cpu" else (not c.device_name or not name or c.device_name == name)
            if c.device == device and (any_dtype or c.dtype == ran_dtype(row)) and same:
                return c
        return None
