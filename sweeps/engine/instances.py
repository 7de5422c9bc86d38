"""A small dated table of AWS GPU instance types: GPUs, vCPUs, the vCPU quota they count against, and
hourly prices on demand and on spot.

The cluster checker (sweeps/cluster_config.py) reads the GPU count and the quota of a node type's
instance type; `--dry-run --instance-type` (sweeps/engine/dry_run.py) prices a sweep's GPU-hours with it.

Prices are USD per instance-hour, Linux, region us-east-1 (other regions cost up to about 30% more).
On-demand: AWS's public on-demand price list (https://aws.amazon.com/ec2/pricing/on-demand/).
Spot: typical prices from AWS's spot price history (`aws ec2 describe-spot-price-history`,
https://aws.amazon.com/ec2/spot/pricing/); spot prices move with demand, by zone and by hour, so the
spot figure is an estimate only. Check both pages before budgeting, and update PRICES_AS_OF with the table.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_AS_OF = "2025-06"
PRICE_REGION = "us-east-1"
PRICE_SOURCE = (
    "AWS on-demand price list (aws.amazon.com/ec2/pricing/on-demand) and spot price history "
    f"(aws.amazon.com/ec2/spot/pricing), Linux, {PRICE_REGION}, as of {PRICES_AS_OF}"
)

# AWS service quota codes (Service Quotas, service "ec2"): running vCPUs of a family group.
QUOTAS = {
    "G": ("Running On-Demand G and VT instances", "L-DB2E81BA", "All G and VT Spot Instance Requests", "L-3819A6DF"),
    "P": ("Running On-Demand P instances", "L-417A185B", "All P Spot Instance Requests", "L-7212CCBC"),
    "Standard": (
        "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
        "L-1216C47A",
        "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
        "L-34B43A08",
    ),
}


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu: str  # the GPU model and its memory
    vcpus: int
    on_demand: float | None  # USD per hour
    spot: float | None  # USD per hour, typical

    @property
    def quota_group(self) -> str:
        family = self.name.split(".", 1)[0]
        if family[0] in "gv" and self.gpus:
            return "G"
        return "P" if family[0] == "p" else "Standard"

    def quota(self, spot: bool = False) -> tuple[str, str]:
        """The name and code of the vCPU quota this type counts against."""
        names = QUOTAS[self.quota_group]
        return (names[2], names[3]) if spot else (names[0], names[1])


def _t(name, gpus, gpu, vcpus, on_demand, spot) -> InstanceType:
    return InstanceType(name, gpus, gpu, vcpus, on_demand, spot)


TYPES = {
    t.name: t
    for t in (
        _t("g4dn.xlarge", 1, "NVIDIA T4 16 GB", 4, 0.526, 0.22),
        _t("g4dn.12xlarge", 4, "NVIDIA T4 16 GB", 48, 3.912, 1.60),
        _t("g5.xlarge", 1, "NVIDIA A10G 24 GB", 4, 1.006, 0.42),
        _t("g5.2xlarge", 1, "NVIDIA A10G 24 GB", 8, 1.212, 0.50),
        _t("g5.12xlarge", 4, "NVIDIA A10G 24 GB", 48, 5.672, 2.30),
        _t("g5.48xlarge", 8, "NVIDIA A10G 24 GB", 192, 16.288, 6.50),
        _t("g6.xlarge", 1, "NVIDIA L4 24 GB", 4, 0.805, 0.35),
        _t("g6.12xlarge", 4, "NVIDIA L4 24 GB", 48, 4.602, 1.90),
        _t("p4d.24xlarge", 8, "NVIDIA A100 40 GB", 96, 32.773, 13.00),
        _t("p5.48xlarge", 8, "NVIDIA H100 80 GB", 192, 55.040, 30.00),
        # CPU-only types the cluster's head node may use (no price needed by the dry run)
        _t("m5.xlarge", 0, "", 4, 0.192, None),
        _t("m5.2xlarge", 0, "", 8, 0.384, None),
        _t("m5.4xlarge", 0, "", 16, 0.768, None),
    )
}
GPU_TYPES = tuple(name for name, t in TYPES.items() if t.gpus)


def cost_line(gpu_hours: float, name: str) -> str:
    """What `gpu_hours` cost on instance type `name` (its hourly price over its GPUs, on demand and on spot), and the
    prices' source: two lines."""
    t = TYPES[name]
    on_demand = gpu_hours * t.on_demand / t.gpus
    spot = f", about ${gpu_hours * t.spot / t.gpus:,.2f} on spot (${t.spot:.2f}/h)" if t.spot else ""
    return (
        f"  cost on {name} ({t.gpus}x {t.gpu}) for these GPU-hours: ${on_demand:,.2f} on demand "
        f"(${t.on_demand:.3f}/h){spot}\n    prices: {PRICE_SOURCE}"
    )
