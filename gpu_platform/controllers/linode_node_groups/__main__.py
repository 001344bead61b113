"""Runs the node-group provider: `python -m gpu_platform.controllers.linode_node_groups`.

Environment: SETTINGS_FILE (pools.json), STUBS_DIR (the generated stubs, build time), LISTEN
(host:port), TLS_DIR (tls.crt, tls.key, ca.crt: mutual TLS, the client must present a certificate
from ca.crt - cluster-autoscaler's cloud-config key/cert/cacert), LINODE_TOKEN, LINODE_API_URL,
KUBERNETES_SERVICE_HOST/PORT (in-cluster), SERVICE_ACCOUNT_DIR (token and ca.crt; default the pod's
mounted service account, the rehearsal points it at a TokenRequest's token), LINODE_FIREWALL_ID,
LINODE_SUBNET_ID.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

HEARTBEAT = Path("/tmp/heartbeat")


def load_stubs(stubs_dir: str):
    if stubs_dir not in sys.path:
        sys.path.insert(0, stubs_dir)
    return (importlib.import_module("externalgrpc_pb2"), importlib.import_module("externalgrpc_pb2_grpc"),
            importlib.import_module("k8s.io.api.core.v1.generated_pb2"))


def serve(groups, stubs_dir: str, listen: str, tls_dir: str | None):
    """Starts the gRPC server; returns it (bound port: server.port)."""
    import grpc

    from gpu_platform.controllers.linode_node_groups.service import make_servicer

    pb2, pb2_grpc, core = load_stubs(stubs_dir)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb2_grpc.add_CloudProviderServicer_to_server(make_servicer(groups, pb2, pb2_grpc, core), server)
    if tls_dir:
        d = Path(tls_dir)
        creds = grpc.ssl_server_credentials([((d / "tls.key").read_bytes(), (d / "tls.crt").read_bytes())],
                                            root_certificates=(d / "ca.crt").read_bytes(), require_client_auth=True)
        port = server.add_secure_port(listen, creds)
    else:
        port = server.add_insecure_port(listen)
    server.start()
    server.port = port  # type: ignore[attr-defined]
    return server


def main() -> None:
    from gpu_platform.controllers.linode_node_groups import settings as settings_mod
    from gpu_platform.controllers.linode_node_groups.kube_api import SA_DIR, KubeClient
    from gpu_platform.controllers.linode_node_groups.linode_api import DEFAULT_BASE_URL, LinodeClient
    from gpu_platform.controllers.linode_node_groups.service import NodeGroups

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_mod.load(os.environ.get("SETTINGS_FILE", "/etc/linode-node-groups/pools.json"))
    token = os.environ.get("LINODE_TOKEN", "")
    if not token:
        sys.exit("LINODE_TOKEN is empty: mount the linode-node-groups token Secret")
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        sys.exit("not in a cluster: KUBERNETES_SERVICE_HOST is not set")
    sa_dir = Path(os.environ.get("SERVICE_ACCOUNT_DIR") or SA_DIR)
    groups = NodeGroups(settings, LinodeClient(token, os.environ.get("LINODE_API_URL", DEFAULT_BASE_URL)),
                        KubeClient(f"https://{host}:{port}", token_file=sa_dir / "token", ca_file=sa_dir / "ca.crt"))
    server = serve(groups, os.environ.get("STUBS_DIR", "/app/stubs"), os.environ.get("LISTEN", "0.0.0.0:8086"),
                   os.environ.get("TLS_DIR", "/etc/linode-node-groups/tls"))
    logging.info("serving %d node group(s) of %s", len(settings.pools), settings.cluster)

    def heartbeat() -> None:
        # Cleans up instances that never joined even while the autoscaler is away; alive while the
        # Linode API answers (the liveness probe checks the file's age).
        while True:
            try:
                groups.refresh()
                HEARTBEAT.touch()
            except Exception:
                logging.exception("reload failed")
            time.sleep(60)

    threading.Thread(target=heartbeat, daemon=True).start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
