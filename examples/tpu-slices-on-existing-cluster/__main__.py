"""Another team's stack: it already runs a Standard GKE cluster and only wants TPU slices.

It reuses two components from the library and nothing else: the cluster is an
input (its name), not something this stack creates.
"""

import pulumi

from components import DcnNetworks, DcnNetworksArgs, TpuSliceNodePool, TpuSliceNodePoolArgs

config = pulumi.Config()
cluster = config.require("cluster")
zone = config.require("zone")
slices = config.get_int("slices") or 2

dcn = DcnNetworks("dcn", DcnNetworksArgs(region=zone.rsplit("-", 1)[0], name_prefix=cluster))
pools = [
    TpuSliceNodePool(
        f"slice-{index}",
        TpuSliceNodePoolArgs(cluster=cluster, zone=zone, topology="4x4", slice_index=index, dcn_networks=dcn.attachments),
    )
    for index in range(slices)
]

pulumi.export("poolNames", [pool.pool_name for pool in pools])
pulumi.export("dcnNetworks", dcn.network_names)
