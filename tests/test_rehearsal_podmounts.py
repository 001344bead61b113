"""A host process with its pod's volumes at the pod's paths (gpu_platform/rehearsal/podmounts.py): what the Trainer's
and JobSet's controllers read from fixed paths, private to each process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpu_platform.rehearsal import podmounts
from gpu_platform.rehearsal.podmounts import SERVICE_ACCOUNT_DIR, in_pod_mounts

CERTS = "/tmp/k8s-webhook-server/serving-certs"


def _folder(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def test_two_processes_each_read_their_own_files_at_the_same_fixed_paths(tmp_path):
    """Trainer's and JobSet's controllers both read /tmp/k8s-webhook-server/serving-certs and the ServiceAccount's
    namespace file: each process started through in_pod_mounts sees its own pod's, and the host's paths are not
    written (a file already there is not what either sees)."""
    why = podmounts.check()
    if why:
        pytest.skip(why)
    read = f"cat {CERTS}/tls.crt {SERVICE_ACCOUNT_DIR}/namespace"
    seen = []
    for who in ("trainer", "jobset"):
        mounts = {CERTS: _folder(tmp_path / who / "certs", {"tls.crt": f"{who}-cert\n"}),
                  SERVICE_ACCOUNT_DIR: _folder(tmp_path / who / "sa", {"namespace": f"{who}-ns\n"})}
        out = subprocess.run(in_pod_mounts(["/bin/sh", "-c", read], mounts), capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        seen.append(out.stdout)
    assert seen == ["trainer-cert\ntrainer-ns\n", "jobset-cert\njobset-ns\n"]
    assert not Path(SERVICE_ACCOUNT_DIR).exists()
    host = Path(CERTS) / "tls.crt"
    assert not host.exists() or host.read_text() not in ("trainer-cert\n", "jobset-cert\n")


def test_a_mount_of_a_file_that_is_not_a_folder_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        in_pod_mounts(["/bin/true"], {CERTS: tmp_path / "f"})


def _trainer_controllers():
    """The Trainer chart's two controllers as the engine run finds them (controllers.find_controllers), rendered."""
    from types import SimpleNamespace

    from gpu_platform.components.platform.kubeflow import TRAINER_RELEASE, trainer_values
    from gpu_platform.data import platform_versions as versions
    from gpu_platform.preflight.fit.render import chart_info, render_chart
    from gpu_platform.rehearsal.controllers import find_controllers
    from tests.fit_support import chart_archive

    path = chart_archive(versions.KUBEFLOW_TRAINER.chart, versions.KUBEFLOW_TRAINER.version)
    objs, _ = render_chart(chart_info(Path(path), TRAINER_RELEASE), TRAINER_RELEASE, trainer_values(), "kubeflow-system",
                           None, [])
    found = find_controllers([SimpleNamespace(name=TRAINER_RELEASE, namespace="kubeflow-system", objects=objs)])
    return {c.binary: c for c in found}


def test_at_their_pods_paths_the_trainer_and_jobset_keep_their_charts_certificate_management_and_no_cert_dir(tmp_path):
    """The Trainer's Configuration has no webhook.certDir (its strict decoding would refuse one: kubeflow/trainer v2.3.0
    pkg/config/config.go EnableStrict) and both rotators read the fixed folder anyway: run at their pods' paths, only
    the listening addresses change (and the Trainer's TrainJob status server port, which listens on all interfaces)."""
    import yaml

    from gpu_platform.rehearsal.controllers import prepare

    ctls = _trainer_controllers()
    assert set(ctls) == {"trainer-manager", "jobset-manager"}
    for binary, cert_key in (("trainer-manager", "certManagement"), ("jobset-manager", "internalCertManagement")):
        ctl = ctls[binary]
        run_dir = tmp_path / binary
        run_dir.mkdir()
        prepare(ctl, run_dir, run_dir / "certs", as_rendered=True, pod_paths=True)
        written = yaml.safe_load((run_dir / f"{binary}.config.yaml").read_text())
        assert "certDir" not in written.get("webhook", {}), written
        assert written[cert_key]["enable"] is True and written["leaderElection"]["leaderElect"] is True
        changed = {c.split(":", 1)[0] for c in ctl.changes}
        assert changed <= {"webhook.port", "webhook.host", "metrics.bindAddress", "health.healthProbeBindAddress",
                           "leaderElection.resourceNamespace", "statusServer.port"}, ctl.changes
    assert ctls["trainer-manager"].config["statusServer"]["port"] == 10443
    assert yaml.safe_load((tmp_path / "trainer-manager" / "trainer-manager.config.yaml").read_text())["statusServer"]["port"] != 10443


def test_a_hosted_controller_that_exits_is_started_again_after_the_kubelets_back_off(tmp_path, monkeypatch):
    """JobSet's controller exits on its first start (its chart's webhook Secret has empty values, which its rotator
    takes for mounted certificates): as the kubelet restarts the container, the host starts it again after 10 s, the
    exited process's log kept, with the same pod paths; the back-off doubles for the next exit."""
    import subprocess
    from types import SimpleNamespace

    from gpu_platform.rehearsal import controller_host, controllers
    from gpu_platform.rehearsal.processes import Proc

    ctl = _trainer_controllers()["jobset-manager"]
    log = tmp_path / "jobset-manager.log"
    log.write_text("ERROR setup problem running manager {\"error\": \"tls: failed to find any PEM data\"}\n")
    ctl.proc = Proc("jobset-manager", ["x"], log, subprocess.Popen(["/bin/false"]))
    ctl.proc.popen.wait()
    mounts = {CERTS: tmp_path}
    h = controller_host.Hosted(ctl, {}, tmp_path / "certs", mounts=mounts)
    started = []
    monkeypatch.setattr(controllers, "start", lambda *a, **kw: started.append(kw))
    now = [1000.0]
    monkeypatch.setattr(controller_host.time, "monotonic", lambda: now[0])
    host = controller_host.ControllerHost.__new__(controller_host.ControllerHost)
    host.events, host.client, host.run_dir = [], None, tmp_path
    host.cp = SimpleNamespace(server="https://127.0.0.1:1", ca_file="ca", procs=None)
    host._restart_if_exited("kubeflow-system/jobset-controller", h)
    assert started == [] and "exited with code 1" in host.events[-1] and "restarted in 10 s" in host.events[-1]
    now[0] += 9
    host._restart_if_exited("kubeflow-system/jobset-controller", h)
    assert started == []
    now[0] += 2
    host._restart_if_exited("kubeflow-system/jobset-controller", h)
    assert started == [{"as_rendered": True, "mounts": mounts}] and h.restarts == 1
    assert (tmp_path / "jobset-manager.0.log").read_text().startswith("ERROR setup")
    host._restart_if_exited("kubeflow-system/jobset-controller", h)  # the fake start left the process exited
    assert "restarted in 20 s" in host.events[-1]
