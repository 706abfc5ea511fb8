# Fashion-MNIST with a small residual network (ResNet-style, He et al. 2015): a 3x3 stem,
# three stages of residual blocks (16 channels at 28x28, 32 at 14x14, 64 at 7x7), each
# block two 3x3 convolutions with batchnorm whose output is added to the block's input
# (`add NAME`); where a stage halves the size the shortcut is a 1x1 stride-2 projection
# (`from=NAME`). Global average pooling and the logits end it. Training images are padded
# by 2 pixels, cropped back to 28x28 at a random place and flipped at random.
#
#     build/bin/sluice-train examples/fashion_resnet.sl
#     build/bin/sluice-train examples/fashion_resnet.sl --set train.epochs=- --set train.steps=20
#
# Reads the TFRecords that `bash scripts/main.sh` writes (paths relative to this file).
# About 30 MFLOP per image forward: minutes per epoch on 2 CPU cores, seconds on a GPU
# (backend auto picks CUDA when there is one).

pipeline train {
    files "../data/fashion/train-*.tfrecord"
    shard auto
    interleave cycle=4 block=16 parallel=auto
    shuffle 10000
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1)
        | random_crop(image, 28, padding=2)
        | random_flip(image)
        | scale(image, 1/255)  parallel=auto
    batch 128 drop_remainder
    prefetch auto
}

pipeline test {
    files "../data/fashion/test-*.tfrecord"
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)
    batch 125
    prefetch auto
}

model resnet {
    input 28x28x1
    conv2d 16 kernel=3x3 padding=same
    batchnorm
    relu name=stem

    # stage 1: 28x28x16, identity shortcuts
    conv2d 16 kernel=3x3 padding=same
    batchnorm
    relu
    conv2d 16 kernel=3x3 padding=same
    batchnorm
    add stem
    relu name=s1b1
    conv2d 16 kernel=3x3 padding=same
    batchnorm
    relu
    conv2d 16 kernel=3x3 padding=same
    batchnorm
    add s1b1
    relu name=s1

    # stage 2: 14x14x32, a projection shortcut
    conv2d 32 kernel=3x3 stride=2 padding=same
    batchnorm
    relu
    conv2d 32 kernel=3x3 padding=same
    batchnorm name=s2_main
    conv2d 32 kernel=1x1 stride=2 from=s1 name=s2_proj
    add s2_main s2_proj
    relu name=s2

    # stage 3: 7x7x64, a projection shortcut
    conv2d 64 kernel=3x3 stride=2 padding=same
    batchnorm
    relu
    conv2d 64 kernel=3x3 padding=same
    batchnorm name=s3_main
    conv2d 64 kernel=1x1 stride=2 from=s2 name=s3_proj
    add s3_main s3_proj
    relu

    global_avg_pool
    dense 10
}

train {
    model resnet
    data train
    eval test every=1
    epochs 10
    optimizer sgd lr=0.05 momentum=0.9 weight_decay=0.0005
    schedule cosine warmup=200
    checkpoint every=1 keep=3
    run_dir "runs/fashion_resnet"
    backend auto
    seed 1
    strategy none
}
