"""The gke-ray-tpu CrossGuard policy pack (``pulumi preview --policy-pack policy``).

The policies live in :mod:`policy.policies`; ``__main__.py`` serves them to the engine.
"""
