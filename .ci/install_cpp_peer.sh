#!/usr/bin/env bash
# The gRPC C++ peers of tests/test_interop_cpp.py: installs Debian's gRPC C++ (when missing) and
# builds tests/interop/cpp into DMRPC_CPP_PEER_DIR (default ~/.cache/dmrpc-cpp), skipping the
# build when neither the sources, the protos nor the gRPC version changed. Idempotent.
# Prints the directory holding dmrpc_cpp_server and dmrpc_cpp_client on stdout (all else on
# stderr), so that (two lines, so that set -e sees a failure):
#   DMRPC_CPP_PEER_DIR="$(.ci/install_cpp_peer.sh)"
#   export DMRPC_CPP_PEER_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out="${DMRPC_CPP_PEER_DIR:-$HOME/.cache/dmrpc-cpp}"
packages=(libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc pkg-config g++ make)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# What the binaries are built from: the C++ sources, the messages, and the library's version.
stamp=$( { cat tests/interop/cpp/Makefile tests/interop/cpp/*.h tests/interop/cpp/*.cc tests/interop/cpp/*.proto \
             protos/dmrpc_gym/protocol/_proto/dm_env_rpc.proto
           dpkg-query -W -f='${Version}' libgrpc++-dev libprotobuf-dev g++; } | sha256sum | cut -d' ' -f1)
if [ -x "$out/dmrpc_cpp_server" ] && [ -x "$out/dmrpc_cpp_client" ] && [ "$(cat "$out/sources.sha256" 2>/dev/null)" = "$stamp" ]; then
  echo "gRPC C++ peers up to date in $out" >&2
else
  echo "building the gRPC C++ peers into $out" >&2
  mkdir -p "$out"
  rm -rf "$out/build" "$out/sources.sha256"
  start=$SECONDS
  make -C tests/interop/cpp --no-print-directory OUT="$out/build" -j"$(nproc)" >&2
  cp "$out/build/dmrpc_cpp_server" "$out/build/dmrpc_cpp_client" "$out/"
  rm -rf "$out/build"
  echo "$stamp" > "$out/sources.sha256"
  echo "built in $((SECONDS - start)) s" >&2
fi
echo "$out"
