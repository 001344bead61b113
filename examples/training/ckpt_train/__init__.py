"""A small, real training program that survives preemption.

It trains a small residual convolutional network on images it generates itself (no downloads), writes
checkpoints atomically to any fsspec store (`s3://`, `gs://`, `file://`), resumes from the newest
complete checkpoint, keeps the last N, and on SIGTERM (a spot/preemptible reclaim, a drain) writes a
checkpoint at the current step before it exits. Run it with `python -m ckpt_train --help`.
"""

__version__ = "1.0.0"
