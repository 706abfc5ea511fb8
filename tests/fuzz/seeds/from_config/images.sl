pipeline train {
  range 0 4
  map decode_jpeg(value, channels=3, dct_scaling=false) | random_resized_crop(value, 224, scale=[0.08, 1], antialias=false)
  map resize(value, shorter=256, antialias=true) | center_crop(value, 224x200, antialias=false) | resize(value, 32x48, max_pixels=2000)
  ignore_errors
  batch 2
}
