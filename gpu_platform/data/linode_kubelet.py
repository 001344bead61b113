"""The kubelet reservations on every Linode node (KubeletConfiguration kubeReserved/systemReserved/evictionHard).

components/linode/render.py writes them into the kubelet's configuration; components/capacity.py subtracts them
from the plan's size to get Linode allocatable. Data, so capacity reads them without importing the Linode
cluster package. Sized for containerd + kubelet at the default 110 pods (the same order as GKE's and EKS's
smallest tiers).
"""

KUBE_RESERVED = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
SYSTEM_RESERVED = {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "1Gi"}
# Setting any evictionHard threshold drops the kubelet's other defaults (they become 0), so all four
# defaults are restated here (kubelet docs, "Node-pressure Eviction": hard eviction thresholds).
EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
                 "nodefs.inodesFree": "5%"}
MAX_PODS = 110

# The swap disk Linode creates beside the root disk when an instance is deployed from an image without
# `swap_size` (the node-group provider sets none): "When deploying from an Image, this field is optional with
# a Linode API default of 512mb" (pulumi-linode Instance.swap_size, the Linode API's instance create). The
# root filesystem, the kubelet's nodefs, is the plan's disk less this.
DEFAULT_SWAP_MIB = 512
