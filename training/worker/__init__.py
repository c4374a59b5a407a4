"""The worker side of a run: what Ray runs on the cluster (the job's entry point and every
Ray Train worker). It imports only ``core`` and this package, which is all the job ships."""
