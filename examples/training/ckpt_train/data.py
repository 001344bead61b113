"""Images the program makes itself, so nothing is downloaded at run time.

Each class has a fixed random pattern (smoothed noise); a sample is its class pattern, randomly
shifted and scaled, plus noise. A network has to learn spatial features to tell the classes apart,
and the batch for a step depends only on (seed, step, rank): a resumed run sees exactly the data the
interrupted one would have seen.
"""

from __future__ import annotations

import torch


class SyntheticImages:
    def __init__(self, num_classes: int = 10, size: int = 32, seed: int = 0, device: str | torch.device = "cpu"):
        self.num_classes, self.size, self.seed, self.device = num_classes, size, seed, torch.device(device)
        g = torch.Generator().manual_seed(seed)
        patterns = torch.randn(num_classes, 3, size, size, generator=g)
        # Smooth the noise so the classes differ in shape, not in single pixels.
        kernel = torch.ones(3, 1, 5, 5) / 25.0
        patterns = torch.nn.functional.conv2d(patterns, kernel, padding=2, groups=3)
        self.patterns = (patterns / patterns.std()).to(self.device)

    def batch(self, step: int, batch_size: int, rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        # Generated on the training device: the GPU is not left waiting for a CPU data loader.
        g = torch.Generator(device=self.device).manual_seed((self.seed * 1_000_003 + step) * 1_009 + rank)
        kw = {"generator": g, "device": self.device}
        labels = torch.randint(0, self.num_classes, (batch_size,), **kw)
        shifts = [int(v) for v in torch.randint(-4, 5, (2,), **kw)]
        scale = 0.15 + 0.5 * torch.rand(batch_size, 1, 1, 1, **kw)  # faint patterns: not learnt in a few steps
        noise = torch.randn(batch_size, 3, self.size, self.size, **kw)
        images = torch.roll(self.patterns[labels], shifts=shifts, dims=(2, 3)) * scale + noise
        return images, labels
