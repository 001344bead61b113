"""Generates the Python gRPC/protobuf stubs from vendor/ (the upstream .proto files, vendor/README.md names
their sources) at build time (the Dockerfile) or test time (a temporary directory). Nothing generated is committed.

    python stubs.py <out_dir>

The Kubernetes protos live under directories named `k8s.io/...` (their import paths): protoc's Python
generator writes their modules to `k8s/io/...` (importable as `k8s.io.api.core.v1.generated_pb2`),
while the gRPC plugin writes empty service modules (these messages have no services) under the
dotted directory, which Python could not import anyway: they are removed.
"""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent / "vendor"
PROTOS = (
    "externalgrpc.proto",
    "k8s.io/api/core/v1/generated.proto",
    "k8s.io/apimachinery/pkg/api/resource/generated.proto",
    "k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto",
    "k8s.io/apimachinery/pkg/runtime/generated.proto",
    "k8s.io/apimachinery/pkg/runtime/schema/generated.proto",
    "k8s.io/apimachinery/pkg/util/intstr/generated.proto",
)


def generate(out_dir: Path, proto_dir: Path = PROTO_DIR) -> Path:
    """Writes externalgrpc_pb2(_grpc).py and k8s/io/... into out_dir; returns out_dir."""
    from grpc_tools import protoc  # build-time only: not in the service image's runtime path

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = resources.files("grpc_tools") / "_proto"
    args = ["protoc", f"-I{proto_dir}", f"-I{well_known}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
            *PROTOS]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {proto_dir}")
    shutil.rmtree(out_dir / "k8s.io", ignore_errors=True)
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: stubs.py <out_dir>")
    generate(Path(sys.argv[1]))
