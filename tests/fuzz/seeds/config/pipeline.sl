pipeline train {
    files "data/fashion/train-*.tfrecord"
    shard auto
    interleave cycle=4 block=16 parallel=auto
    shuffle 10000 seed=1
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)  parallel=auto
    batch 128 drop_remainder
    prefetch auto; take 5
}
model m { dense 256 activation=relu; x [1, 2.5, -3e-2] "s\t" 64MiB 10% }
