"""A stand-in for the clouds' CSI provisioners: nothing provisions disks here, so each
PersistentVolumeClaim left Pending on a StorageClass the cluster has gets a PersistentVolume made for it (bound
by claimRef, the size, access modes and class it asks, pinned to the node the scheduler selected for a
WaitForFirstConsumer class). The PV controller and the scheduler's volume binding then do the rest as in a
cluster. A claim without a class (no default StorageClass gave it one) or on a class the cluster lacks stays
Pending, as no provisioner acts on it in a cluster either (`unprovisioned`).

And the StorageClass a cloud creates itself (not in any rendered release), so that the DefaultStorageClass
admission plugin gives class-less claims the class they get there."""

from __future__ import annotations

from typing import Optional

from gpu_platform.rehearsal.kube import ApiError, Client, PollingLoop

SELECTED_NODE = "volume.kubernetes.io/selected-node"
# GKE creates `standard-rwo` (the Compute Engine PD CSI driver, WaitForFirstConsumer) as the cluster's
# default class (GKE docs, "Using the Compute Engine persistent disk CSI Driver": standard-rwo is the
# default StorageClass from GKE 1.22). EKS (1.30+) annotates no default and the program renders its own
# gp3 default; Linode's CSI chart renders its classes.
CLOUD_STORAGE_CLASSES = {
    "gcp": [{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": "standard-rwo", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
             "provisioner": "pd.csi.storage.gke.io", "volumeBindingMode": "WaitForFirstConsumer",
             "allowVolumeExpansion": True, "parameters": {"type": "pd-balanced"}}],
}


def existing_storage_class(cfg: object) -> Optional[dict]:
    """On a cluster the stack does not create (cloud kubernetes), the StorageClass it names, which that cluster has:
    its provisioner is the rehearsal's stand-in (Provisioner below), binding Immediate. None on the clouds."""
    section = getattr(cfg, "kubernetes", None) if getattr(cfg, "cloud", None) == "kubernetes" else None
    if section is None:
        return None
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": section.storage_class},
            "provisioner": "rehearsal.invalid/existing-cluster", "volumeBindingMode": "Immediate"}


def cluster_storage_classes(cloud: str, cfg: object) -> list[tuple[dict, str]]:
    """The StorageClasses the cluster has before the program runs, each with why: the cloud's own (GKE's
    standard-rwo), or the one an existing cluster has (cloud kubernetes: kubernetes.storageClass). The rehearsal's
    installer (run.py) and the engine run (engine.py) start their clusters with them."""
    out = [(obj, f"StorageClass {obj['metadata']['name']} (the cloud creates it)")
           for obj in CLOUD_STORAGE_CLASSES.get(cloud, [])]
    existing = existing_storage_class(cfg)
    if existing is not None:
        out.append((existing, f"StorageClass {existing['metadata']['name']} (the existing cluster has it: "
                              "kubernetes.storageClass)"))
    return out


class Provisioner(PollingLoop):
    name = "rehearsal-provisioner"

    def __init__(self, client: Client, interval: float = 1.0):
        super().__init__(client, interval)
        self.made: list[str] = []
        # Claims no provisioner takes, as in a cluster: no class (the cluster has no default StorageClass, so the
        # admission plugin gave it none) or a class the cluster lacks. They stay Pending, and whatever mounts them.
        self.unprovisioned: set[str] = set()

    def _wait_for_first_consumer(self, cls: Optional[str]) -> bool:
        if not cls:
            return False
        sc = self.client.get("storage.k8s.io/v1", "StorageClass", cls)
        return bool(sc) and sc.get("volumeBindingMode") == "WaitForFirstConsumer"

    def once(self) -> None:
        for pvc in self.client.list("v1", "PersistentVolumeClaim"):
            if (pvc.get("status") or {}).get("phase") != "Pending" or (pvc.get("spec") or {}).get("volumeName"):
                continue
            meta, spec = pvc["metadata"], pvc["spec"]
            node = (meta.get("annotations") or {}).get(SELECTED_NODE)
            cls = spec.get("storageClassName") or ""
            if not cls or self.client.get("storage.k8s.io/v1", "StorageClass", cls) is None:
                self.unprovisioned.add(f"{meta['namespace']}/{meta['name']} ({f'class {cls}, which the cluster lacks' if cls else 'no class'})")
                continue
            if self._wait_for_first_consumer(cls) and not node:
                continue  # the scheduler picks the node first
            name = f"pv-{meta['namespace']}-{meta['name']}"[:250]
            pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                  "spec": {"capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")},
                           "accessModes": spec.get("accessModes") or ["ReadWriteOnce"], "storageClassName": cls,
                           "persistentVolumeReclaimPolicy": "Delete", "volumeMode": spec.get("volumeMode", "Filesystem"),
                           "hostPath": {"path": f"/rehearsal-volumes/{name}"},
                           "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}}}
            if node:
                pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
            try:
                self.client.create(pv)
                self.made.append(f"{meta['namespace']}/{meta['name']} ({cls or 'no class'}, {pv['spec']['capacity']['storage']})")
            except ApiError as exc:
                if exc.status != 409:
                    raise
