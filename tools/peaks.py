"""The fastest any kernel could do a family's arithmetic on this device: the FLOP side of the timing floor.

A timing below the floor is a measurement error or a cheat, so the rate must never be below what the
device can really do: it is the dense tensor-core rate of the narrowest operand type (what a kernel
could convert its operands to), per SM and clock for the compute capability, times the device's own SM
count and maximum clock. The per-SM figures are NVIDIA datasheet peaks divided by SMs x boost clock
(A100: 312 TFLOP/s fp16 = 108 SMs x 1.41 GHz x 2048; H100 SXM: 989 TFLOP/s = 132 x 1.83 GHz x 4096),
rounded up, not measured here. Unknown architectures get rates that can only be too high.
"""

from __future__ import annotations

from collections.abc import Iterable

# dense tensor-core FLOPs per SM per clock, by compute capability and the operand class a kernel computes in
_PER_SM_CLOCK = {
    80: {"tf32": 1024, "fp16": 2048, "fp8": 2048, "int8": 4096},
    86: {"tf32": 512, "fp16": 1024, "fp8": 1024, "int8": 2048},
    89: {"tf32": 512, "fp16": 1024, "fp8": 2048, "int8": 2048},
    90: {"tf32": 2048, "fp16": 4096, "fp8": 8192, "int8": 8192},
    100: {"tf32": 4096, "fp16": 8192, "fp8": 16384, "int8": 16384},
}
_CLASS = {"fp32": "tf32", "fp16": "fp16", "bf16": "fp16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "int8": "int8"}


def _rates(cc: int) -> dict[str, int]:
    """The rates of the newest known capability not above `cc` (older GPUs get sm_80's, newer ones twice the
    newest known): too high at worst, never too low."""
    newest = max(_PER_SM_CLOCK)
    if cc > newest:
        return {k: 2 * v for k, v in _PER_SM_CLOCK[newest].items()}
    known = [k for k in _PER_SM_CLOCK if k <= cc]
    return _PER_SM_CLOCK[max(known) if known else min(_PER_SM_CLOCK)]


def peak_flops(cc: int, sms: int, clock_khz: int, operand_dtypes: Iterable[str]) -> float:
    """FLOP/s at the fastest rate any of the operand types allows (index types such as int32 do not count)."""
    rates = _rates(cc)
    classes = {_CLASS[d] for d in operand_dtypes if d in _CLASS}
    per_clock = max((rates[c] for c in classes), default=max(rates.values()))
    return float(per_clock) * sms * clock_khz * 1e3
