"""`python -m ckpt_train`: train, checkpoint, resume, and checkpoint again on SIGTERM.

Every option has an environment variable, so a TrainJob sets them in `env` (the platform's
`checkpoint-store` ConfigMap provides CHECKPOINT_URL and the S3 endpoint/region where needed).
Logs are JSON lines on stdout: `resume`, `step` (loss, step time, samples/s, GPU utilisation),
`checkpoint` (step, path, seconds, reason), `stopped` / `done`.

Exit codes: 0 when the run has reached --total-steps (also when it already had); 75 (EX_TEMPFAIL,
"try again later") after a SIGTERM/SIGINT once the checkpoint of the current step is saved: non-zero
on purpose (the pod did not finish its work, so neither the Job nor the JobSet may count it as
succeeded), and not 143, which any process killed by SIGTERM reports, checkpoint or not. The
platform's torch-checkpointed runtime restarts the job on 75 without counting it as a failure
(its podFailurePolicy); 2 bad options; 78 (EX_CONFIG) when the container was given GPUs that torch
cannot use (the driver's libraries are not reachable): a loud failure, counted against the job's
retries, instead of a silent run on the CPU (see gpus_given and choose_device).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional

# Stopped by a signal after saving a checkpoint: the torch-checkpointed runtime's podFailurePolicy
# (gpu_platform/components/platform/kubeflow.py CHECKPOINT_EXIT_CODE) restarts the job on it uncounted.
EXIT_STOPPED = 75
# Given GPUs it cannot use (sysexits.h EX_CONFIG): a failure the runtime's podFailurePolicy counts
# (only 75 and disruptions are restarted uncounted), so a node whose driver libraries are not
# reachable fails the job after its retries rather than training for days on the CPU.
EXIT_NO_GPU = 78
# NVIDIA_VISIBLE_DEVICES values that ask for no GPU (NVIDIA container toolkit,
# internal/config/image/cuda_image.go devicesFromEnvvars: unset, empty or "void"; "none": the
# driver without devices).
NO_GPU_VALUES = ("", "void", "none")


def _env(name: str, default: Any) -> Any:
    return os.environ.get(name, default)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ckpt_train", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint-url", default=_env("CHECKPOINT_URL", None),
                   help="bucket or folder URL (s3://, gs://, file://); env CHECKPOINT_URL")
    p.add_argument("--run-name", default=_env("RUN_NAME", _env("TRAINJOB_NAME", "checkpointed")),
                   help="checkpoints go to <checkpoint-url>/<run-name>/; env RUN_NAME")
    p.add_argument("--total-steps", type=int, default=int(_env("TOTAL_STEPS", 20000)))
    p.add_argument("--checkpoint-every", type=int, default=int(_env("CHECKPOINT_EVERY_STEPS", 500)),
                   help="steps between periodic checkpoints; env CHECKPOINT_EVERY_STEPS")
    p.add_argument("--keep", type=int, default=int(_env("KEEP_CHECKPOINTS", 3)),
                   help="complete checkpoints kept (older ones are deleted); env KEEP_CHECKPOINTS")
    p.add_argument("--batch-size", type=int, default=int(_env("BATCH_SIZE", 512)))
    p.add_argument("--width", type=int, default=int(_env("MODEL_WIDTH", 64)),
                   help="channels of the first stage (the network is 4x wider at the end)")
    p.add_argument("--lr", type=float, default=float(_env("LEARNING_RATE", 0.05)))
    p.add_argument("--seed", type=int, default=int(_env("SEED", 0)))
    p.add_argument("--log-every", type=int, default=int(_env("LOG_EVERY_STEPS", 50)))
    p.add_argument("--device", default=_env("DEVICE", "auto"), choices=("auto", "cpu", "cuda"),
                   help="auto (the GPU when the container was given one, else the CPU) | cpu | cuda; env DEVICE")
    args = p.parse_args(argv)
    if not args.checkpoint_url:
        # On the platform CHECKPOINT_URL comes from ConfigMap training/checkpoint-store, which has none on a cluster
        # without a checkpoint store (cloud kubernetes without kubernetes.checkpointStore). Stop before any work:
        # a run that cannot checkpoint loses everything to the next preemption.
        p.error("--checkpoint-url (or CHECKPOINT_URL) is required, and none is set. On the platform it comes from "
                "ConfigMap training/checkpoint-store, which has no CHECKPOINT_URL when the cluster has no checkpoint "
                "store (cloud kubernetes without kubernetes.checkpointStore): set one in the stack, or give the job a "
                "URL of its own (s3://, gs://, or file:// on a volume that outlives the pod)")
    for name in ("total_steps", "checkpoint_every", "keep", "batch_size", "width", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def log(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "time": round(time.time(), 3), **fields}), flush=True)


class StopRequest:
    """Set by SIGTERM/SIGINT; the loop finishes the step it is in, checkpoints and exits."""

    def __init__(self) -> None:
        self.signal: Optional[int] = None
        self.at: Optional[float] = None

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signal is None:
            self.signal, self.at = signum, time.monotonic()

    @property
    def requested(self) -> bool:
        return self.signal is not None


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def writer(self) -> bool:
        return self.rank == 0


class GpuUnavailable(Exception):
    """The container was given GPUs (or --device cuda was asked for) and torch cannot use them."""


def gpus_given(env: dict[str, str], dev_dir: str = "/dev") -> list[str]:
    """What shows this container was given GPUs, whatever torch makes of it: NVIDIA_VISIBLE_DEVICES
    naming devices (the NVIDIA device plugin sets it for each GPU it allocates, GPU UUIDs or, with its
    volume-mounts strategy, /var/run/nvidia-container-devices; Linode and EKS), or /dev/nvidia<N>
    device nodes (on GKE, whose device plugin passes the allocated GPUs' device nodes and mounts the
    driver at /usr/local/nvidia; on the toolkit clouds the runtime hook adds them too). Empty: none."""
    found = []
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    if visible is not None and visible.strip().lower() not in NO_GPU_VALUES:
        found.append(f"NVIDIA_VISIBLE_DEVICES={visible}")
    try:
        nodes = sorted(n for n in os.listdir(dev_dir) if n.startswith("nvidia") and n[len("nvidia"):].isdigit())
    except OSError:
        nodes = []
    found.extend(os.path.join(dev_dir, n) for n in nodes)
    return found


def choose_device(requested: str, cuda_available: bool, given: list[str], env: dict[str, str]) -> str:
    """`cuda` or `cpu`. `auto` uses the GPU where torch sees one; where the container was given GPUs
    (gpus_given) and torch sees none, it refuses (GpuUnavailable) rather than fall back to the CPU.
    `cuda` without CUDA refuses too; `cpu` is always honoured (training on the CPU on purpose)."""
    if requested == "cpu":
        return "cpu"
    if cuda_available:
        return "cuda"
    if requested == "auto" and not given:
        return "cpu"
    why = (f"the container was given GPUs ({', '.join(given)})" if given
           else "--device cuda (DEVICE=cuda) was asked for")
    raise GpuUnavailable(
        f"{why} but torch cannot use CUDA (torch.cuda.is_available() is False; "
        f"LD_LIBRARY_PATH={env.get('LD_LIBRARY_PATH', '')!r}, "
        f"NVIDIA_DRIVER_CAPABILITIES={env.get('NVIDIA_DRIVER_CAPABILITIES', '')!r}). The driver's libraries "
        "are not reachable: on GKE LD_LIBRARY_PATH must include /usr/local/nvidia/lib64 (the platform's "
        "torch-checkpointed runtime and the example image set it); with the NVIDIA container toolkit "
        "(Linode, EKS) NVIDIA_DRIVER_CAPABILITIES must include compute. Refusing to train on the CPU; "
        "to do so on purpose, pass --device cpu (DEVICE=cpu)")


def init_distributed(device_kind: str) -> Dist:
    """torchrun (the torch-distributed runtime) sets RANK/WORLD_SIZE; one process runs alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as dist

    dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=int(os.environ.get("LOCAL_RANK", "0")))


class GpuUtilisation:
    """GPU busy percentage from NVML where there is a GPU; None elsewhere."""

    def __init__(self, index: int):
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 — no driver, no GPU, no NVML: metrics are optional
            self.handle = None

    def percent(self) -> Optional[int]:
        if self.handle is None:
            return None
        return int(self._nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)


def learning_rate(step: int, total: int, peak: float, warmup: int = 100) -> float:
    """Linear warm-up, then cosine decay to 0 at `total`. A pure function of the step, so a resumed
    run (even one given a new --total-steps) needs no scheduler state."""
    import math

    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * peak * (1 + math.cos(math.pi * progress))


def train(args: argparse.Namespace, stop: StopRequest) -> int:
    import torch

    from ckpt_train.checkpoints import CheckpointStore, decoder, encode
    from ckpt_train.data import SyntheticImages
    from ckpt_train.model import SmallResNet

    kind = choose_device(args.device, torch.cuda.is_available(), gpus_given(dict(os.environ)), dict(os.environ))
    dist_ = init_distributed(kind)
    device = torch.device(kind, dist_.local_rank) if kind == "cuda" else torch.device("cpu")
    if kind == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(args.seed)

    store = CheckpointStore(f"{args.checkpoint_url.rstrip('/')}/{args.run_name}", keep=args.keep)
    if dist_.writer:
        store.ensure_folder()
        for path in store.remove_partial():
            log("partial-removed", path=path)

    model = SmallResNet(width=args.width).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    step = 0
    found = store.load_newest(decoder(device),
                              lambda c, e: log("checkpoint-unreadable", path=c.path, error=repr(e)))
    if found is not None:
        ckpt, state = found
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])
        log("resume", step=step, path=ckpt.path)
    if dist_.world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if kind == "cuda" else None)
    raw_model = model.module if dist_.world > 1 else model

    def save(reason: str) -> None:
        if dist_.writer:
            started = time.monotonic()
            ckpt = store.save(step, encode({"model": raw_model.state_dict(), "optimizer": opt.state_dict(),
                                            "step": step}))
            pruned = store.prune()
            log("checkpoint", step=step, path=ckpt.path, reason=reason,
                seconds=round(time.monotonic() - started, 3), pruned=pruned)
        if dist_.world > 1:
            torch.distributed.barrier()

    data = SyntheticImages(seed=args.seed, device=device)
    gpu = GpuUtilisation(device.index or 0) if kind == "cuda" else None
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if kind == "cuda" else torch.autocast("cpu", enabled=False)
    model.train()
    window_start, window_steps = time.monotonic(), 0
    saved_step = step
    while step < args.total_steps:
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, args.total_steps, args.lr)
        images, labels = data.batch(step, args.batch_size, dist_.rank)
        images = images.contiguous(memory_format=torch.channels_last)
        with amp:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        window_steps += 1

        if step % args.log_every == 0 or step == args.total_steps:
            elapsed = time.monotonic() - window_start
            log("step", step=step, loss=round(float(loss.detach()), 4), step_time_s=round(elapsed / window_steps, 4),
                samples_per_s=round(window_steps * args.batch_size * dist_.world / elapsed, 1),
                gpu_util_percent=gpu.percent() if gpu else None)
            window_start, window_steps = time.monotonic(), 0

        if step % args.checkpoint_every == 0 or step == args.total_steps:
            save("final" if step == args.total_steps else "periodic")
            saved_step = step
        if step == args.total_steps:
            break  # the work is done: exit 0 even if a stop was asked for meanwhile
        stopping = stop.requested
        if dist_.world > 1:  # every rank stops at the same step, or the collective calls hang
            flag = torch.tensor([1.0 if stopping else 0.0], device=device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            stopping = bool(flag.item())
        if stopping:
            if saved_step != step:
                save("signal")
            log("stopped", step=step, signal=stop.signal,
                seconds_since_signal=round(time.monotonic() - stop.at, 3) if stop.at else None)
            return EXIT_STOPPED

    log("done", step=step)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    stop = StopRequest()
    stop.install()  # before anything slow: a reclaim can come during start-up too
    try:
        return train(args, stop)
    except GpuUnavailable as e:
        log("gpu-unavailable", error=str(e))
        print(f"ckpt_train: {e}", file=sys.stderr, flush=True)
        return EXIT_NO_GPU


if __name__ == "__main__":
    sys.exit(main())
