pipeline a {
    range 0 50
    map one_hot(value, 50)
}
pipeline b {
    range 100 120 2
    take 7
}
pipeline pick {
    range 0 30
    filter value < 2
}
pipeline m {
    sample a b weights=[0.7, 0.3] seed=3 stop_on_empty=false
    batch 4
    prefetch 2
}
pipeline c {
    choose a b by=pick stop_on_empty=true
    shard num=2 index=1
    skip 1
}
pipeline g {
    files "x-*.tfrecord"
    shuffle global seed=2 index_dir="idx"
    batch 8 drop_remainder
}
