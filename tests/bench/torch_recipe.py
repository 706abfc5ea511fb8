#!/usr/bin/python3
"""Anchor: PyTorch DataLoader with torchvision's classification reference recipe
(references/classification: presets.ClassificationPresetTrain + the mixup/cutmix collate),
on an image folder: what Sluice's rand_augment / trivial_augment / mixup_cutmix pipeline is
measured against.

Usage: torch_recipe.py DIR [workers] [batch] [epochs] [interpolation]
  Per image (PIL, as the recipe's default backend): RandomResizedCrop(224, bilinear),
  RandomHorizontalFlip(0.5), TrivialAugmentWide(interpolation), PILToTensor,
  ConvertImageDtype(float), Normalize(ImageNet mean, std), RandomErasing(p=0.1).
  Per batch, in the collate function (so in the workers, as the recipe does it):
  RandomChoice([RandomMixup(p=1, alpha=0.2), RandomCutmix(p=1, alpha=1.0)]) over
  10 classes (labels: the digit before '.jpg', as torch_loader.py reads them).
  interpolation: nearest (default: what Sluice's augment ops implement) or bilinear (the
  recipe's default for TrivialAugmentWide).
Each of `epochs` epochs (default 2) runs over the whole folder with persistent workers
(default 2) and the best one is reported (the first pays for forking the workers), in
torch_loader.py's form: the last line ends with '= R images/s'.
"""
import glob
import math
import sys
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import default_collate
import torchvision.transforms as T
from torchvision.transforms import InterpolationMode
import torchvision.transforms.functional as F

d = sys.argv[1]
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 2
interp = sys.argv[5] if len(sys.argv) > 5 else 'nearest'
files = sorted(glob.glob(d + '/*.jpg'))
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
NUM_CLASSES = 10
ta_interp = InterpolationMode.NEAREST if interp == 'nearest' else InterpolationMode.BILINEAR

train_tf = T.Compose([
    T.RandomResizedCrop(224, interpolation=InterpolationMode.BILINEAR),
    T.RandomHorizontalFlip(0.5),
    T.TrivialAugmentWide(interpolation=ta_interp),
    T.PILToTensor(),
    T.ConvertImageDtype(torch.float),
    T.Normalize(MEAN, STD),
    T.RandomErasing(p=0.1),
])


class RandomMixup(torch.nn.Module):
    """references/classification/transforms.py's RandomMixup (torchvision 0.14)."""

    def __init__(self, num_classes, p=0.5, alpha=1.0):
        super().__init__()
        self.num_classes, self.p, self.alpha = num_classes, p, alpha

    def forward(self, batch, target):
        batch, target = batch.clone(), target.clone()
        if target.ndim == 1:
            target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)
        if torch.rand(1).item() >= self.p:
            return batch, target
        batch_rolled, target_rolled = batch.roll(1, 0), target.roll(1, 0)
        lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        batch_rolled.mul_(1.0 - lam)
        batch.mul_(lam).add_(batch_rolled)
        target_rolled.mul_(1.0 - lam)
        target.mul_(lam).add_(target_rolled)
        return batch, target


class RandomCutmix(torch.nn.Module):
    """references/classification/transforms.py's RandomCutmix (torchvision 0.14)."""

    def __init__(self, num_classes, p=0.5, alpha=1.0):
        super().__init__()
        self.num_classes, self.p, self.alpha = num_classes, p, alpha

    def forward(self, batch, target):
        batch, target = batch.clone(), target.clone()
        if target.ndim == 1:
            target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)
        if torch.rand(1).item() >= self.p:
            return batch, target
        batch_rolled, target_rolled = batch.roll(1, 0), target.roll(1, 0)
        lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        _, H, W = F.get_dimensions(batch)
        r_x, r_y = torch.randint(W, (1,)), torch.randint(H, (1,))
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half, r_h_half = int(r * W), int(r * H)
        x1, y1 = int(torch.clamp(r_x - r_w_half, min=0)), int(torch.clamp(r_y - r_h_half, min=0))
        x2, y2 = int(torch.clamp(r_x + r_w_half, max=W)), int(torch.clamp(r_y + r_h_half, max=H))
        batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
        lam = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))
        target_rolled.mul_(1.0 - lam)
        target.mul_(lam).add_(target_rolled)
        return batch, target


mixupcutmix = T.RandomChoice([RandomMixup(NUM_CLASSES, p=1.0, alpha=0.2), RandomCutmix(NUM_CLASSES, p=1.0, alpha=1.0)])


def collate(samples):
    return mixupcutmix(*default_collate(samples))


class Folder(Dataset):
    def __len__(self): return len(files)

    def __getitem__(self, i):
        return train_tf(Image.open(files[i]).convert('RGB')), int(files[i][-5]) % NUM_CLASSES


def init(_): torch.set_num_threads(1)


def run():
    torch.set_num_threads(1)
    dl = DataLoader(Folder(), batch_size=batch, shuffle=True, num_workers=workers, drop_last=True,
                    persistent_workers=workers > 0, worker_init_fn=init, collate_fn=collate)
    best = (0.0, 0, 0.0)
    for ep in range(epochs):
        n = 0
        t0 = time.perf_counter()
        for x, y in dl:
            n += x.shape[0]
        dt = time.perf_counter() - t0
        print(f'  recipe epoch {ep + 1}: {n} images in {dt:.2f} s ({n / dt:.1f} per s)', flush=True)
        if n / dt > best[0]:
            best = (n / dt, n, dt)
    return best


r, n, dt = run()
print(f'torch DataLoader workers={workers} recipe (trivial_augment {interp}, mixup/cutmix): '
      f'best epoch {n} images in {dt:.2f} s = {r:.1f} images/s')
