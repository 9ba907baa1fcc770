"""What machine a measurement or a fitted artifact belongs to, as one short string.

`hardware_id(device)` is what a SABA calibration and a TDES scorer record as the hardware they
were fitted on, and what their users compare it with:
  "cuda:<GPU name>"                      e.g. "cuda:NVIDIA H200"
  "cpu:<threads>-threads:<CPU model>"    e.g. "cpu:2-threads:AMD EPYC"
A CPU's round costs depend on the torch thread count as much as on the chip, so both are in it.
The CPU model comes from /proc/cpuinfo where there is one (Linux), else from `platform`.
The dtype decodes run in changes the costs too: one that is not the device's default (float32 on
a CPU, bfloat16 on CUDA) is appended, ":bfloat16" say, so a calibration fitted in one dtype warns
when used in another, as one from another machine does.
"""

import platform
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC", "Intel(R) Xeon(R) ..."), or the machine type."""
    if CPUINFO.is_file():
        for line in CPUINFO.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    return platform.processor() or platform.machine() or "unknown"


def cpu_matmul_units() -> str:
    """The widest matrix units the CPU offers, which set its bfloat16 speed: "AMX", "AVX512-BF16",
    "AVX512", "AVX2", or "" (unknown: no /proc/cpuinfo flags)."""
    if not CPUINFO.is_file():
        return ""
    flags = set()
    for line in CPUINFO.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags = set(value.split())
            break
    for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"), ("avx2", "AVX2")):
        if flag in flags:
            return name
    return ""


def hardware_id(device: str | torch.device, dtype: torch.dtype | None = None) -> str:
    """The hardware string of a device running `dtype` (module doc; None: the device's default);
    threads are torch's at the time of the call."""
    device = torch.device(device)
    if device.type == "cuda":
        base, default = f"cuda:{torch.cuda.get_device_name(device)}", torch.bfloat16
    elif device.type == "cpu":
        base, default = f"cpu:{torch.get_num_threads()}-threads:{cpu_model()}", torch.float32
    else:
        return device.type
    return base if dtype is None or dtype == default else f"{base}:{str(dtype).removeprefix('torch.')}"
