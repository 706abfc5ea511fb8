pipeline p {
    range 0 100 3
    shuffle 10 seed=1
    map scale(value, 2) | cast(value, int32) | one_hot(value, 300) parallel=2
    filter value < 50
    batch 4 drop_remainder
    take 3
    prefetch auto
}
pipeline q {
    range 0 10
    map decode_raw(value, uint8, 8) | normalize(value, mean=[0.5], std=[0.25])
    ignore_errors
    batch 2 padded pad=-1
    repeat 2
}
