"""The rehearsal: the stack's rendered platform installed on a throwaway, real Kubernetes control plane
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK nodes) with the platform's own
controllers (Kueue, JobSet, Kubeflow Trainer, the Prometheus operator) as local processes.

A layer beside preflight: it reads preflight's plan, rendered releases and node model; preflight's
command line (`--rehearse`) calls it, nothing in preflight's fit imports it.
"""
