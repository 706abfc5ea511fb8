# ImageNet-style training: ResNet-18 (He et al. 2015) on 224x224 crops, the recipe of
# torchvision's reference scripts with the usual refinements (Goyal et al. 2017: linear
# warm-up, no weight decay on biases and batchnorm; label smoothing 0.1; cosine decay).
#
# The data: one folder per class of JPEGs (ImageNet's train/n01440764/*.JPEG layout, the
# validation images moved into class folders the same way), converted to TFRecords with
# TensorFlow's ImageNet feature names (image/encoded, image/class/label, ...); labels are
# the sorted folder names, 0..999:
#
#     sluice-record convert images /data/imagenet/train data/imagenet --shards 1024
#     sluice-record convert images /data/imagenet/val data/imagenet --shards 128 --split validation
#
# (paths below are relative to this file: data/imagenet/ beside the examples/ folder).
# One GPU, then a cluster of N GPUs (one replica each, gradients averaged by ring
# allreduce; batch 256 is the global batch, so each of N replicas takes 256/N):
#
#     build/bin/sluice-train examples/imagenet_resnet.sl --set train.backend=cuda
#     build/bin/sluice-launch -n 8 -- build/bin/sluice-train examples/imagenet_resnet.sl \
#         --set train.backend=cuda --set train.strategy=ring
#
#     srun --nodes 4 --ntasks-per-node 8 build/bin/sluice-train examples/imagenet_resnet.sl \
#         --set train.backend=cuda --set train.strategy=ring
#
# (sluice-launch starts the replicas of one machine; on several, each replica finds the
# others from Slurm as here, a `cluster` block, TF_CONFIG or Open MPI, and its GPU from its
# local rank: see the README). About 1.8 GFLOP per image forward.

pipeline train {
    files "../data/imagenet/train-*.tfrecord"
    shard auto                                  # by file: every replica reads its own shards
    interleave cycle=16 block=1 parallel=auto
    shuffle 10000
    map parse_example(image/encoded: bytes(as=image), image/class/label: int64(as=label))
        | decode_jpeg(image, channels=3)        # fused with the crop: decodes only its rows
        | random_resized_crop(image, 224)       # scale [0.08, 1], ratio [3/4, 4/3]
        | random_flip(image)
        | normalize(image, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])  parallel=auto
    batch 256 drop_remainder
    prefetch auto
}

# torchvision's current reference recipe (references/classification/train.py with
# --auto-augment ta_wide --random-erase 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0): the crop
# and flip above, TrivialAugmentWide, random erasing of the normalized image, and on each
# batch mixup or cutmix with one-hot labels. bench_pipeline's `recipe` mode measures it
# against PyTorch's DataLoader doing the same. Its labels come out as float32[256, 1000]
# (mixed one-hot rows): a consumer that takes soft targets (the Python module's torch
# adapter feeding a PyTorch loop) reads it, e.g. `sluice-stats imagenet_resnet.sl
# --pipeline train_recipe`; sluice-train itself takes integer labels only, so it trains on
# `train` above.
pipeline train_recipe {
    files "../data/imagenet/train-*.tfrecord"
    shard auto
    interleave cycle=16 block=1 parallel=auto
    shuffle 10000
    map parse_example(image/encoded: bytes(as=image), image/class/label: int64(as=label))
        | decode_jpeg(image, channels=3)
        | random_resized_crop(image, 224)
        | random_flip(image)
        | trivial_augment(image)                # TrivialAugmentWide, 31 bins, nearest
        | normalize(image, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
        | random_erasing(image, p=0.1)  parallel=auto
    batch 256 drop_remainder
    map mixup_cutmix(image, label, mixup_alpha=0.2, cutmix_alpha=1.0, num_classes=1000)
    prefetch auto
}

# torchvision's Resize(256) + CenterCrop(224) (test_imagenet_eval checks the geometry);
# dct_scaling=false: the same pixels as a full decode, resized.
pipeline validation {
    files "../data/imagenet/validation-*.tfrecord"
    map parse_example(image/encoded: bytes(as=image), image/class/label: int64(as=label))
        | decode_jpeg(image, channels=3, dct_scaling=false)
        | resize(image, shorter=256)
        | center_crop(image, 224)
        | normalize(image, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])  parallel=auto
    batch 250
    prefetch auto
}

# Two 3x3 convolutions with batchnorm, added to the block's input.
block basic(filters) {
    conv2d filters kernel=3x3 padding=same
    batchnorm
    relu
    conv2d filters kernel=3x3 padding=same
    batchnorm
    add in
    relu
}

# The first block of stages 2-4: half the size, twice the channels, and a projection
# shortcut (1x1 stride-2 convolution with batchnorm, torchvision's `downsample`).
block down(filters) {
    conv2d filters kernel=3x3 stride=2 padding=same
    batchnorm
    relu
    conv2d filters kernel=3x3 padding=same
    batchnorm name=main
    conv2d filters kernel=1x1 stride=2 from=in
    batchnorm name=proj
    add main proj
    relu
}

model resnet18 {
    input 224x224x3
    conv2d 64 kernel=7x7 stride=2 padding=same  # 112x112x64
    batchnorm
    relu
    maxpool 3x3 stride=2 padding=same           # 56x56x64
    basic 64
    basic 64
    down 128                                    # 28x28x128
    basic 128
    down 256                                    # 14x14x256
    basic 256
    down 512                                    # 7x7x512
    basic 512
    global_avg_pool
    dense 1000
}

train {
    model resnet18
    data train
    eval validation every=1
    epochs 90
    optimizer sgd lr=0.1 momentum=0.9 nesterov=true weight_decay=1e-4 decay_exclude=[bias, batchnorm]
    label_smoothing 0.1
    schedule cosine warmup=25020                # 5 epochs of 5004 steps (1,281,167 images / 256)
    checkpoint every=1 keep=3
    run_dir "runs/imagenet_resnet"
    backend auto
    seed 1
    strategy none
}
