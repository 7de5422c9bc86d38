"""Numeric precision of a trial's training and evaluation (`--precision`, recorded in the run).

| name | on a CUDA GPU                                         | on the CPU                         |
|------|-------------------------------------------------------|------------------------------------|
| auto | tf32 on Ampere and newer GPUs, else fp16             | fp32                               |
| fp32 | fp32 matmuls (TF32 off)                               | fp32                               |
| tf32 | fp32 weights, TF32 tensor-core matmuls (Ampere on)    | refused                            |
| bf16 | bf16 autocast, fp32 weights and optimiser state       | bf16 autocast (slow; for checks)   |
| fp16 | fp16 autocast with a gradient scaler                  | refused                            |

`check_request(name, trials_on_gpu(args))` is the driver's check before any compute; `stage_precision`
puts the precision into a stage's config; `resolve(name, device)`
is what a trial (or stage) runs under, raising `PrecisionError` when its device cannot do it.
The loss is computed outside autocast, in fp32, from the pooled embeddings.

Why `auto` is tf32 and not bf16: at the paper's batch of 32 short sentences a trial is bound by
the CPU launching kernels, and autocast's casts double the launches. Measured on an H100
(benchmarks/gpu.py, BERT-base shape, layer 12, one STS-B epoch): 562 trials/h in tf32 against
264 in bf16 alone, 1060 against 876 four to a GPU; bf16 needs half the activation memory, so it
is the choice where memory, not time, limits the packing (or with large batches).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainables.core.errors import SweepInputError

if TYPE_CHECKING:
    import torch

PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")
_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # torch dtypes by name


class PrecisionError(SweepInputError):
    """A precision the device cannot run."""


def _cpu_refusal(name: str) -> str:
    need = (
        "TF32 tensor cores (an Ampere or newer GPU)"
        if name == "tf32"
        else "a CUDA GPU (fp16 autocast with a gradient scaler)"
    )
    return (
        f"--precision {name} needs {need}, but the trials run on the CPU; use --precision fp32, or bf16 "
        f"(autocast on the CPU: slow, for checks), or run on a GPU"
    )


def check_request(name: str, on_gpu: bool | None) -> None:
    """Refuse an unknown name, or one the trials' device cannot run (`on_gpu` False: CPU trials;
    None: not known here, each trial checks on its own device)."""
    import torch

    if name not in PRECISIONS:
        raise SweepInputError(f"--precision {name!r} is not one of {', '.join(PRECISIONS)}")
    if on_gpu is False and name in ("tf32", "fp16"):
        raise PrecisionError(_cpu_refusal(name))
    if on_gpu and torch.cuda.is_available():
        resolve(name, torch.device("cuda"))


def trials_on_gpu(args) -> bool | None:
    """Whether a sweep's trials will run on a CUDA GPU: never with --gpus-per-trial 0; on a local
    Ray, when this machine has one (--local-gpus alone declares logical GPUs, not devices); on a
    cluster (--address), not known to the driver: None."""
    import torch

    if args.gpus_per_trial == 0:
        return False
    if not getattr(args, "address", None):
        return torch.cuda.is_available()
    return None


def stage_precision(args) -> dict:
    """What a stage's config (hence its key in the stage store) holds of the precision: nothing
    where the stage computes in plain fp32 for sure (stages stored before precision existed keep
    their keys), else {"precision": the name asked for}."""
    name = getattr(args, "precision", "fp32")
    return {} if name == "fp32" or (name == "auto" and trials_on_gpu(args) is False) else {"precision": name}


@dataclass(frozen=True)
class Precision:
    name: str  # fp32, tf32, bf16 or fp16 (never auto)
    device_type: str  # cuda or cpu

    @property
    def dtype(self) -> torch.dtype | None:
        import torch

        return getattr(torch, _DTYPES[self.name]) if self.name in _DTYPES else None

    def autocast(self):
        """The context to run forwards in (a no-op for fp32 and tf32)."""
        import torch

        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A scaler that is active for fp16 only (a pass-through otherwise)."""
        import torch

        return torch.amp.GradScaler(self.device_type, enabled=self.name == "fp16")

    def apply_matmul_settings(self) -> None:
        """TF32 matmuls for tf32 only; the process-wide flags are set again by every trial."""
        import torch

        if self.device_type == "cuda":
            allow = self.name == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = allow
            torch.backends.cudnn.allow_tf32 = allow


def _bf16_ok(device: torch.device) -> bool:
    import torch

    return torch.cuda.is_bf16_supported(including_emulation=False) if device.type == "cuda" else True


def resolve(name: str, device: torch.device) -> Precision:
    """The precision a trial on `device` runs under (`auto` decided here)."""
    import torch

    device = torch.device(device)
    if name not in PRECISIONS:
        raise SweepInputError(f"--precision {name!r} is not one of {', '.join(PRECISIONS)}")
    if device.type != "cuda":
        if name in ("tf32", "fp16"):
            raise PrecisionError(_cpu_refusal(name))
        return Precision("fp32" if name == "auto" else name, device.type)
    major, minor = torch.cuda.get_device_capability(device)
    if name == "auto":
        return Precision("tf32" if major >= 8 else "fp16", "cuda")
    if name == "bf16" and not _bf16_ok(device):
        raise PrecisionError(
            f"--precision bf16: this GPU ({torch.cuda.get_device_name(device)}, compute capability "
            f"{major}.{minor}) has no bf16 arithmetic; use --precision fp16 or auto"
        )
    if name == "tf32" and major < 8:
        raise PrecisionError(
            f"--precision tf32: this GPU ({torch.cuda.get_device_name(device)}, compute capability "
            f"{major}.{minor}) has no TF32 tensor cores; use --precision fp32 or fp16"
        )
    return Precision(name, "cuda")


FUSED_ADAMW_DEVICES = ("cuda", "cpu")


def adamw(param_groups, lr: float, device: torch.device, weight_decay: float = 0.0) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step on CUDA and the CPU (the same update to float rounding,
    fewer launches; on the CPU 7x faster than the per-tensor loop for MiniLM). `weight_decay` applies
    to groups that do not set their own; 0 unless given (not torch's 0.01, which no method asks for)."""
    import torch

    return torch.optim.AdamW(
        param_groups, lr=lr, weight_decay=weight_decay, fused=torch.device(device).type in FUSED_ADAMW_DEVICES
    )


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`: through pinned memory, without waiting, on CUDA."""
    import torch

    if torch.device(device).type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
