"""A one-slice worker group that stops training after a checkpoint and waits to be replaced.

With :data:`HOLD_ENV` set to a step, each worker of a group no larger than one slice, once MaxText has saved a
checkpoint of that step or a later one and the save is committed, trains no further: it waits, as a run still
training would, until Ray Train's controller ends the group (on an elastic resize, or when the job is stopped).
A larger group is not held. The fake-TPU run that loses a slice and takes it back sets it
(``tests/fake_tpu.py``'s ``lose_a_slice``), so its one-slice group can neither end before the lost slice comes
back (however long its hosts take to start) nor go on there for hundreds of steps after (until Ray Train next
looks for more slices): when the group of both slices starts, the run has a few steps left, from the held
checkpoint.

Only the pace of the one-slice group changes: its steps and checkpoints up to the hold, Ray Train's elastic
policy, the resize and MaxText's restore are the real ones.
"""

from __future__ import annotations

import os
import time

from gke_ray_tpu.training.worker import trainer

HOLD_ENV = "FAKE_TPU_HOLD_ONE_SLICE_AFTER_STEP"
HOLD_LINE = "[fake-tpu] holding the one-slice group after its checkpoint of step"
_train_loop = trainer.train_loop_per_worker


def train_loop_per_worker(config: dict) -> None:
    """The trainer's own loop, MaxText's checkpoint save wrapped to hold a one-slice group after step HOLD_ENV."""
    import ray.train
    from maxtext.common import checkpointing

    hold_after = int(os.environ[HOLD_ENV])
    one_slice = ray.train.get_context().get_world_size() <= config["hosts_per_slice"]
    save = checkpointing.maybe_save_checkpoint

    def save_then_hold(checkpoint_manager, state, maxtext_config, data_iterator, step=None):
        save(checkpoint_manager, state, maxtext_config, data_iterator, step)
        if one_slice and step is not None and int(step) >= hold_after and checkpoint_manager is not None:
            checkpointing.wait_until_finished(checkpoint_manager)
            if checkpointing.latest_step(checkpoint_manager) != int(step):  # MaxText calls this every step: no save
                return
            print(f"{HOLD_LINE} {int(step)}", flush=True)
            while True:
                time.sleep(1)

    if one_slice:
        checkpointing.maybe_save_checkpoint = save_then_hold
    _train_loop(config)
