"""The TPU pods' ``LIBTPU_INIT_ARGS``: the tutorial's XLA tuning, per generation, and the DCN interfaces.

One source for the RayCluster's manifests (``components/ray_manifests.py``) and the compile check
(``preflight/xla_check.py``), which compiles every run with the flags its pods will get.
"""

from __future__ import annotations

TUTORIAL_XLA_FLAGS = (
    "--xla_tpu_scoped_vmem_limit_kib=122880",
    "--xla_tpu_use_minor_sharding_for_major_trivial_input=true",
    "--xla_tpu_relayout_group_size_threshold_for_reduce_scatter=1",
    "--xla_tpu_assign_all_reduce_scatter_layout",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
    "--xla_enable_async_all_gather=true",
)
"""The tutorial's XLA/libtpu tuning for MaxText on Trillium."""

ALL_GATHER_FUSION = "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true"
ALL_GATHER_FUSION_GENERATIONS = frozenset({"v5e"})
"""Where libtpu 0.0.50.1 (jax 0.12's, the pods' through the workers' lock) compiles the tutorial's all-gather fusion beside its
``--xla_enable_async_all_gather=true``. For v6e, v5p and the other generations it refuses the train step
(``FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ...``, "not supported/recommended
on platforms other than TPU v5e ... incorrect results, hang, SDC"); each flag alone compiles. Found by the compile
check (``bench/bench_compile_flags.py`` prints the table); MaxText's own multislice scripts set it false."""

DCN_INTERFACE_FLAG = "--megascale_grpc_interface_prefixes"


def interface_prefixes(dcn_interfaces: int) -> str:
    """DRANET hands the pod eth1..ethN; megascale must also keep loopback."""
    return ",".join([f"eth{i}" for i in range(1, dcn_interfaces + 1)] + ["lo"])


def libtpu_init_args(generation: str, dcn_interfaces: int) -> str:
    """The TPU pods' ``LIBTPU_INIT_ARGS`` on a slice of ``generation`` with ``dcn_interfaces`` extra NICs."""
    flags = [flag for flag in TUTORIAL_XLA_FLAGS if flag != ALL_GATHER_FUSION or generation in ALL_GATHER_FUSION_GENERATIONS]
    if dcn_interfaces:
        flags.append(f"{DCN_INTERFACE_FLAG}={interface_prefixes(dcn_interfaces)}")
    return " ".join(flags)
