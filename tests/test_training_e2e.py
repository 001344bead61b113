"""Preempted training resumes from its checkpoint: the real training program, end to end.

The example training program (examples/training/ckpt_train) runs as a child process in its own
virtualenv (.venv-training, `make training-venv`: torch 2.13.0 CPU, fsspec, s3fs), against a real S3
API served on localhost by moto's server mode, exactly as it reaches a Linode/AWS bucket (the
`AWS_ENDPOINT_URL_S3` the platform's checkpoint-store ConfigMap sets). Assertions are on step numbers
from the program's JSON log and on the objects in the bucket, not on log wording.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import pytest

from gpu_platform.components.platform.kubeflow import CHECKPOINT_EXIT_CODE

# Runs the example program in its own virtualenv (.venv-training): `make check` leaves these out.
pytestmark = pytest.mark.sidevenv

ROOT = Path(__file__).resolve().parents[1]
TRAINING_DIR = ROOT / "examples" / "training"
TRAINING_PYTHON = Path(os.environ.get("TRAINING_PYTHON", ROOT / ".venv-training" / "bin" / "python"))
BUCKET = "ckpt-e2e"
# The pod's grace period in the example TrainJob; a SIGTERM checkpoint must land well within it.
GRACE_S = 60
# Small network and batches: the behaviour under test is checkpointing, not learning speed.
SMALL = ["--width", "8", "--batch-size", "8", "--log-every", "1"]
# How long a run of the program may take before the test calls it hung: not a speed target. A resumed 30-step run
# took over 180 s in a local `make test` (2026-11-29, load near 10: torch's import alone took 50 s).
HANG_GUARD_S = 600


@pytest.fixture(scope="module")
def s3():
    if not TRAINING_PYTHON.exists():
        pytest.fail(f"{TRAINING_PYTHON} is missing: run `make training-venv` (make test does)")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client
    server.stop()


class Run:
    """The training program as a child process, its JSON log read as it arrives."""

    def __init__(self, url: str, run_name: str, args: list[str], endpoint: str | None = None,
                 extra_env: dict[str, str] | None = None):
        env = {**{k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}, "PYTHONPATH": str(TRAINING_DIR),
               "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "RUN_NAME": run_name}
        if endpoint:
            env.update(AWS_ENDPOINT_URL_S3=endpoint, AWS_ACCESS_KEY_ID="testing",
                       AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1")
        env.update(extra_env or {})
        self.proc = subprocess.Popen(
            [str(TRAINING_PYTHON), "-m", "ckpt_train", "--checkpoint-url", url, *SMALL, *args],
            cwd=TRAINING_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def wait_for(self, predicate, timeout: float = HANG_GUARD_S) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if event is None:
                raise AssertionError(f"the program ended before the awaited event: {self.stderr()}")
            self.events.append(event)
            if predicate(event):
                return event
        raise AssertionError(f"no awaited event within {timeout}s; last events: {self.events[-5:]}")

    def finish(self, timeout: float = HANG_GUARD_S) -> int:
        code = self.proc.wait(timeout=timeout)
        while True:  # drain what is left of the log
            event = self._queue.get(timeout=10)
            if event is None:
                return code
            self.events.append(event)

    def stderr(self) -> str:
        return self.proc.stderr.read()[-2000:] if self.proc.poll() is not None and self.proc.stderr else ""

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["event"] == kind]


def objects(client, prefix: str) -> list[str]:
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"].rsplit("/", 1)[-1] for o in listing.get("Contents", []))


def step_of(name: str) -> int:
    return int(name.removeprefix("step-").removesuffix(".pt"))


def completed(names: list[str]) -> list[int]:
    return sorted(step_of(n) for n in names if n.startswith("step-") and n.endswith(".pt"))


@pytest.fixture(scope="module")
def s3_private_ca(tmp_path_factory):
    """The same S3 API over HTTPS, its certificate signed by a CA of its own (an on-premises MinIO or Ceph RGW): what
    kubernetes.checkpointStore.caBundle is for. Yields (endpoint, client, the CA's PEM file)."""
    if not TRAINING_PYTHON.exists():
        pytest.fail(f"{TRAINING_PYTHON} is missing: run `make training-venv` (make test does)")
    import ssl

    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    from gpu_platform.rehearsal.pki import CA

    folder = tmp_path_factory.mktemp("private-ca")
    ca = CA.new("onprem-s3-ca")
    cert, key = ca.issue("localhost", dns=["localhost"], ips=["127.0.0.1"])
    (folder / "ca.pem").write_bytes(ca.cert_pem)
    (folder / "tls.crt").write_bytes(cert)
    (folder / "tls.key").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True,
                         ssl_context=context)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"https://localhost:{server.server_port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", verify=str(folder / "ca.pem"),
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client, folder / "ca.pem"
    server.shutdown()


def test_a_store_with_a_private_ca_is_trusted_through_aws_ca_bundle(s3_private_ca):
    """What the platform sets for kubernetes.checkpointStore.caBundle (AWS_CA_BUNDLE, the mounted file) is what the
    program's s3fs/aiobotocore reads: with it, checkpoints land and a restart resumes; without it, TLS verification
    fails and the program stops (no silent run without checkpoints)."""
    endpoint, client, ca_file = s3_private_ca
    url = f"s3://{BUCKET}/runs"
    trusted = Run(url, "ca", ["--total-steps", "20", "--checkpoint-every", "10"], endpoint, {"AWS_CA_BUNDLE": str(ca_file)})
    assert trusted.finish() == 0, trusted.stderr()
    assert completed(objects(client, "runs/ca/")) == [10, 20]
    resumed = Run(url, "ca", ["--total-steps", "30", "--checkpoint-every", "10"], endpoint, {"AWS_CA_BUNDLE": str(ca_file)})
    assert resumed.finish() == 0, resumed.stderr()
    assert resumed.of("resume")[0]["step"] == 20
    # one attempt: botocore would retry a TLS failure with backoff, to the same end
    untrusted = Run(url, "no-ca", ["--total-steps", "20", "--checkpoint-every", "10"], endpoint, {"AWS_MAX_ATTEMPTS": "1"})
    code = untrusted.finish()
    err = untrusted.stderr()
    assert code not in (0, CHECKPOINT_EXIT_CODE), err
    assert "CERTIFICATE_VERIFY_FAILED" in err or "certificate verify failed" in err, err
    assert not untrusted.of("step") and completed(objects(client, "runs/no-ca/")) == []


def test_sigkill_then_restart_resumes_from_the_last_checkpoint(s3):
    endpoint, client = s3
    url, total = f"s3://{BUCKET}/runs", 120
    first = Run(url, "kill", ["--total-steps", str(total), "--checkpoint-every", "20"], endpoint)
    first.wait_for(lambda e: e["event"] == "checkpoint" and e["step"] >= 40)
    first.wait_for(lambda e: e["event"] == "step" and e["step"] % 20 == 7)  # mid-interval
    first.proc.send_signal(signal.SIGKILL)
    assert first.finish() == -signal.SIGKILL
    killed_at = max(e["step"] for e in first.of("step"))
    newest = completed(objects(client, "runs/kill/"))[-1]
    assert newest <= killed_at and newest % 20 == 0  # work since the last checkpoint is lost, no more

    second = Run(url, "kill", ["--total-steps", str(total), "--checkpoint-every", "20"], endpoint)
    assert second.finish() == 0, second.stderr()
    assert second.of("resume")[0]["step"] == newest
    assert second.of("step")[0]["step"] == newest + 1  # no step repeated from scratch
    assert second.of("done")[0]["step"] == total
    assert completed(objects(client, "runs/kill/"))[-1] == total


def test_sigterm_writes_a_checkpoint_at_the_current_step_within_the_grace_period(s3):
    endpoint, client = s3
    url, total = f"s3://{BUCKET}/runs", 400
    # No periodic checkpoint before the signal: the one that appears must be the SIGTERM one.
    run = Run(url, "term", ["--total-steps", str(total), "--checkpoint-every", "1000"], endpoint)
    run.wait_for(lambda e: e["event"] == "step" and e["step"] >= 25)
    signalled = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)
    code = run.finish(timeout=GRACE_S)
    assert time.monotonic() - signalled < GRACE_S
    # Not 0 (the pod did not finish the job's work) and not 143 (what a bare SIGTERM kill reports): the
    # code the torch-checkpointed runtime's podFailurePolicy restarts on without counting a failure.
    assert code == CHECKPOINT_EXIT_CODE
    last_step_before_exit = max(e["step"] for e in run.of("step"))
    stopped = run.of("stopped")[0]["step"]
    assert stopped == last_step_before_exit >= 25
    assert completed(objects(client, "runs/term/")) == [stopped]

    resumed = Run(url, "term", ["--total-steps", str(stopped + 10), "--checkpoint-every", "1000"], endpoint)
    assert resumed.finish() == 0, resumed.stderr()
    assert resumed.of("resume")[0]["step"] == stopped  # no step lost
    assert resumed.of("step")[0]["step"] == stopped + 1


def test_partial_and_unreadable_checkpoints_are_ignored(s3):
    endpoint, client = s3
    url = f"s3://{BUCKET}/runs"
    first = Run(url, "partial", ["--total-steps", "40", "--checkpoint-every", "20"], endpoint)
    assert first.finish() == 0, first.stderr()
    assert completed(objects(client, "runs/partial/")) == [20, 40]
    # What a kill during a write leaves: a temporary object (never a final name) of a later step,
    # and, on a store without atomic rename, a final-named object cut short.
    client.put_object(Bucket=BUCKET, Key="runs/partial/.partial-step-00000060.pt-0123abcd", Body=b"\x80half")
    good = client.get_object(Bucket=BUCKET, Key="runs/partial/step-00000040.pt")["Body"].read()
    client.put_object(Bucket=BUCKET, Key="runs/partial/step-00000050.pt", Body=good[: len(good) // 3])

    second = Run(url, "partial", ["--total-steps", "45", "--checkpoint-every", "20"], endpoint)
    assert second.finish() == 0, second.stderr()
    assert [e["path"].rsplit("/", 1)[-1] for e in second.of("checkpoint-unreadable")] == ["step-00000050.pt"]
    assert second.of("resume")[0]["step"] == 40
    assert second.of("done")[0]["step"] == 45
    names = objects(client, "runs/partial/")
    assert not [n for n in names if n.startswith(".partial-")]  # the writer removed the leftover


def test_retention_keeps_the_newest_n(s3):
    endpoint, client = s3
    run = Run(f"s3://{BUCKET}/runs", "keep", ["--total-steps", "70", "--checkpoint-every", "10", "--keep", "3"], endpoint)
    assert run.finish() == 0, run.stderr()
    assert len(run.of("checkpoint")) == 7
    assert objects(client, "runs/keep/") == ["step-00000050.pt", "step-00000060.pt", "step-00000070.pt"]


def test_file_url_to_a_folder_that_does_not_exist_yet(tmp_path):
    if not TRAINING_PYTHON.exists():
        pytest.fail(f"{TRAINING_PYTHON} is missing: run `make training-venv` (make test does)")
    target = tmp_path / "volume" / "not" / "there"
    run = Run(f"file://{target}", "local", ["--total-steps", "30", "--checkpoint-every", "10", "--keep", "2"])
    assert run.finish() == 0, run.stderr()
    assert sorted(p.name for p in (target / "local").iterdir()) == ["step-00000020.pt", "step-00000030.pt"]
    again = Run(f"file://{target}", "local", ["--total-steps", "30", "--checkpoint-every", "10"])
    assert again.finish() == 0, again.stderr()
    assert again.of("resume")[0]["step"] == 30 and again.of("done")[0]["step"] == 30
    assert not again.of("step")  # a finished run does no more work


def test_bad_options_exit_2_without_traceback():
    if not TRAINING_PYTHON.exists():
        pytest.fail(f"{TRAINING_PYTHON} is missing: run `make training-venv` (make test does)")
    proc = subprocess.run([str(TRAINING_PYTHON), "-m", "ckpt_train", "--keep", "0", "--checkpoint-url", "file:///tmp/x"],
                          cwd=TRAINING_DIR, env={**os.environ, "PYTHONPATH": str(TRAINING_DIR)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--keep must be at least 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_a_checkpoint_store_it_stops_at_its_start_saying_why():
    """A cluster without a checkpoint store (cloud kubernetes without kubernetes.checkpointStore) has no CHECKPOINT_URL
    in ConfigMap training/checkpoint-store; the example job reads it with `optional: true`, so the pod starts without
    it and the program says what is missing before any work (a run that cannot checkpoint loses it all to the next
    preemption), rather than the pod never starting."""
    if not TRAINING_PYTHON.exists():
        pytest.fail(f"{TRAINING_PYTHON} is missing: run `make training-venv` (make test does)")
    env = {k: v for k, v in os.environ.items() if k != "CHECKPOINT_URL"}
    proc = subprocess.run([str(TRAINING_PYTHON), "-m", "ckpt_train", *SMALL], cwd=TRAINING_DIR,
                          env={**env, "PYTHONPATH": str(TRAINING_DIR)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "none is set" in proc.stderr and "ConfigMap training/checkpoint-store" in proc.stderr
    assert "kubernetes.checkpointStore" in proc.stderr and "Traceback" not in proc.stderr
    assert '"event": "step"' not in proc.stdout


def _run_plain(args: list[str], extra_env: dict[str, str], timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    if not TRAINING_PYTHON.exists():
        pytest.fail(f"{TRAINING_PYTHON} is missing: run `make training-venv` (make test does)")
    env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "DEVICE")}
    env.update(PYTHONPATH=str(TRAINING_DIR), OMP_NUM_THREADS="1", **extra_env)
    return subprocess.run([str(TRAINING_PYTHON), "-m", "ckpt_train", *SMALL, *args], cwd=TRAINING_DIR, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("given", ["GPU-8f6d2e3c-1b2a-4c5d-9e8f-0a1b2c3d4e5f", "/var/run/nvidia-container-devices", "all"])
def test_given_a_gpu_it_cannot_use_it_refuses_to_train_on_the_cpu(tmp_path, given):
    """Issue 34 item 1. Before: a pod given a GPU whose driver libraries the image could not reach
    (GKE without /usr/local/nvidia/lib64 on LD_LIBRARY_PATH) trained on the CPU under `--device auto`,
    exit 0, days slower, holding the GPU. Now: a non-zero exit that is not the checkpoint code (75,
    which the runtime restarts uncounted, forever), a message naming the cause, and no checkpoint.
    Here the CPU build of torch is the image that cannot use CUDA; NVIDIA_VISIBLE_DEVICES is what the
    device plugin sets for an allocated GPU (UUIDs; its volume-mounts strategy's folder)."""
    proc = _run_plain(["--checkpoint-url", f"file://{tmp_path}/ckpt", "--total-steps", "3"],
                      {"NVIDIA_VISIBLE_DEVICES": given})
    assert proc.returncode not in (0, CHECKPOINT_EXIT_CODE), proc.stdout + proc.stderr
    assert proc.returncode == 78
    assert "torch cannot use CUDA" in proc.stderr and given in proc.stderr
    assert "/usr/local/nvidia/lib64" in proc.stderr and "--device cpu" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(json.loads(l).get("event") == "step" for l in proc.stdout.splitlines() if l.startswith("{"))
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").rglob("step-*"))


def test_device_cuda_without_cuda_refuses_and_device_cpu_trains_on_purpose(tmp_path):
    refused = _run_plain(["--checkpoint-url", f"file://{tmp_path}/a", "--total-steps", "2", "--device", "cuda"], {})
    assert refused.returncode == 78 and "--device cuda" in refused.stderr, refused.stderr
    # --device cpu is honoured even where GPUs were given (training on the CPU on purpose).
    cpu = _run_plain(["--checkpoint-url", f"file://{tmp_path}/b", "--total-steps", "2"],
                     {"NVIDIA_VISIBLE_DEVICES": "GPU-0", "DEVICE": "cpu"})
    assert cpu.returncode == 0, cpu.stderr
    # No GPU given and none asked for: auto is the CPU, as before.
    none = _run_plain(["--checkpoint-url", f"file://{tmp_path}/c", "--total-steps", "2"], {"NVIDIA_VISIBLE_DEVICES": "void"})
    assert none.returncode == 0, none.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
