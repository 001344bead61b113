"""Cost model of gpu-platform: a dated, sourced price catalog, a stack cost estimator, a workload
simulator and reports. Pure Python: nothing in gpu_platform/costs/ imports Pulumi."""
