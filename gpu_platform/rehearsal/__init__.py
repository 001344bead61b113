"""The rehearsal: the stack's rendered platform installed on a throwaway, real Kubernetes control plane
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK nodes) with the platform's own
controllers (Kueue, JobSet, Kubeflow Trainer, the Prometheus operator) as local processes.

A layer above preflight: it reads preflight's plan, rendered releases and node model. Preflight's
command line (gpu_platform/preflight/__main__.py, the `cli` layer above both) calls it for `--rehearse`;
nothing else in preflight imports it.
"""
