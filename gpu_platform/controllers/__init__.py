"""Controllers this repository runs inside the clusters it builds (shipped as source, see gpu_platform/components/)."""
