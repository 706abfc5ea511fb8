#!/usr/bin/env bash
# Installs what Sluice needs to build, test and run, with apt-get, only when something is
# missing: on a machine that has everything it costs one dpkg query and returns.
set -eu
pkgs=(
  build-essential cmake pkg-config
  zlib1g-dev libzmq3-dev libprotobuf-c-dev protobuf-c-compiler
  libturbojpeg0-dev libjpeg62-turbo-dev libopenblas-dev
  dataset-fashion-mnist
  # tests: independent readers, reference decoder, fuzzing
  libjpeg-turbo-progs python3 python3-protobuf python3-crc32c python3-numpy
  clang libclang-rt-14-dev
  # the Python module (python/) and its tests: headers, pip install ./python offline, torch
  python3-dev python3-setuptools python3-pip python3-wheel python3-torch
  # the Debian packages' test (test_debian_packages.sh): cpack's DEB tools and lintian
  dpkg-dev lintian
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
