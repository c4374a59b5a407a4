"""The fake-TPU job's entry point (``python -m fake_tpu_job``): see ``__main__``."""
