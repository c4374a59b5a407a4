"""Another team's stack: it already runs a Standard GKE cluster and only wants TPU slices.

It reuses two components from the library and nothing else: the cluster is an
input (read with ``Cluster.get``, never created or changed), not something this stack owns.
"""

import pulumi
import pulumi_gcp as gcp

from gke_ray_tpu.components import DcnNetworks, DcnNetworksArgs, TpuSliceNodePool, TpuSliceNodePoolArgs

config = pulumi.Config()
project = pulumi.Config("gcp").require("project")
name = config.require("cluster")
zone = config.require("zone")
location = config.get("clusterLocation") or zone
slices = config.get_int("slices") or 2

cluster = gcp.container.Cluster.get("existing", id=f"projects/{project}/locations/{location}/clusters/{name}")
dcn = DcnNetworks("dcn", DcnNetworksArgs(region=zone.rsplit("-", 1)[0], name_prefix=name))
pools = [
    TpuSliceNodePool(
        f"slice-{index}",
        TpuSliceNodePoolArgs(cluster=cluster, zone=zone, topology="4x4", slice_index=index, additional_networks=dcn.attachments),
    )
    for index in range(slices)
]

pulumi.export("poolNames", [pool.pool_name for pool in pools])
pulumi.export("dcnNetworks", dcn.network_names)
