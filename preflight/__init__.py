"""Preflight: what a run needs and costs, checked before any TPU is paid for.

No Pulumi and no JAX at import: these run anywhere, inside ``pulumi preview`` too. Builds on ``core`` only.

- ``report``: one run against its slices (sharding verdict, HBM estimate, step time and cost, XLA's verdict), as the
  previews print it. The sharding rule, model shapes and prices it reads are ``core``'s: every JobSpec, MaxTextRun
  and the worker apply the same rule.
- ``mesh``: MaxText's parallelism keys as mesh axes; ``memory``: the per-chip HBM breakdown;
  ``flops``: training FLOPs and the estimated step time; ``cost``: what a run, an idle stack and a queued run's
  wait cost, and what a stack's first ``pulumi up`` starts.
- ``xla_check``: XLA's own verdict, compiling a run for its TPU topology on this CPU (``xla_compile`` is the
  child process that loads libtpu; ``xla_live_set`` reads what XLA keeps live at the peak).
- ``cold_start``: what a run's TPU hosts pull and install before the first step.

The stack reads its config into these in ``stack/checks.py``.

>>> from gke_ray_tpu.core.tpu_catalogue import slice_shape
>>> from gke_ray_tpu.preflight.memory import estimate_hbm
>>> b = estimate_hbm("llama3-8b", slice_shape("v6e", "4x4"), 2,
...                  {"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}, 4, 4096)
>>> b.fits
True
"""
